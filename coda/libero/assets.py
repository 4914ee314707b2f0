"""LIBERO object / fixture assets (MuJoCo XML from the asset wheels) -> MjSpec bodies.

robosuite (which LIBERO builds on) merges only an object file's <asset> and <worldbody> into its
own radian-angle model, makes file paths absolute, takes the body named "object" as the
object's root and prefixes every name with "<instance>_". We do the same on the XML text at
load time, plus the two fixes MuJoCo 4 needs (assets are never edited on disk):
  flat_stove  two textures share the name "tex-stove_knob": the second (the knob button's) is
              dropped, as robosuite's `merge_assets` drops an asset whose name is taken, so the
              button's material draws the first (its metal), as in LIBERO's frames.
  microwave   `inertiagrouprange="4 4"` leaves the door with zero inertia; robosuite drops the
              file's <compiler>, so inertia comes from all geoms, as here.
Collision geometry is boxes; the meshes are visual only (contype = conaffinity = 0). With
`visual=False` (rollouts, verification) the visual geoms, meshes, textures and materials are
dropped, which makes compiling fast and changes no dynamics.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import xml.etree.ElementTree as ET

import mujoco

from coda.libero import data

# workspaces are the table (our table box), not assets
WORKSPACES = {
    "table": "main_table",
    "kitchen_table": "kitchen_table",
    "living_room_table": "living_room_table",
    "study_table": "study_table",
    "floor": "floor",
}
_SEARCH = (
    "stable_hope_objects",
    "stable_scanned_objects",
    "turbosquid_objects",
    "articulated_objects",
    "custom_objects",
    "scenes",
)  # robosuite classes' folders


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, pathlib.Path]:
    root = data.assets_root()
    out: dict[str, pathlib.Path] = {}
    for folder in reversed(_SEARCH):  # earlier folders win (black_book: turbosquid's)
        for p in sorted((root / folder).rglob("*.xml")):
            out[p.stem] = p
    return out


def categories() -> list[str]:
    return sorted(_index())


def xml_path(category: str) -> pathlib.Path:
    idx = _index()
    if category not in idx:
        raise KeyError(f"no LIBERO asset for category {category!r}; known: {sorted(idx)}")
    return idx[category]


def _keep_first_assets(root: ET.Element) -> None:
    """Drops an asset whose (kind, name) an earlier one has, as robosuite's `merge_assets`
    keeps only the first (flat_stove's second "tex-stove_knob" texture)."""
    seen = set()
    asset = root.find("asset")
    for el in list(asset) if asset is not None else []:
        key = (el.tag, el.get("name"))
        if key in seen:
            asset.remove(el)
        seen.add(key)


@functools.lru_cache(maxsize=64)
def _patched_xml(category: str, visual: bool) -> str:
    path = xml_path(category)
    root = ET.parse(path).getroot()
    for c in root.findall("compiler") + root.findall("size"):  # robosuite keeps neither
        root.remove(c)
    ET.SubElement(root, "compiler", angle="radian", inertiafromgeom="auto")
    _keep_first_assets(root)  # flat_stove (and its yellow_stove variant): a repeated name
    for el in root.iter():
        f = el.get("file")
        if f is not None:
            el.set("file", str((path.parent / f).resolve()))
    return ET.tostring(root, encoding="unicode")


def load(category: str, visual: bool = False) -> mujoco.MjSpec:
    """The category's XML as an MjSpec (load-time fixes applied); its root is body "object"."""
    spec = mujoco.MjSpec.from_string(_patched_xml(category, visual))
    if spec.body("object") is None:
        raise ValueError(f"{category}: no body named 'object' in {xml_path(category)}")
    if not visual:
        for g in list(spec.geoms):
            if g.contype == 0 and g.conaffinity == 0:
                spec.delete(g)
            elif g.type == mujoco.mjtGeom.mjGEOM_MESH:
                raise ValueError(f"{category}: a colliding mesh geom; visual=False needs boxes")
        for g in spec.geoms:
            g.material = ""
        for el in list(spec.meshes) + list(spec.materials) + list(spec.textures):
            spec.delete(el)
    return spec


def site_parts(category: str) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """site name -> (body the site's joints come from, that body's direct joints), as LIBERO's
    `_load_sites_in_arena` finds them: walk the descendants of the root body in document order,
    stop at the first with no site in its subtree, the last body containing the site wins."""
    root = ET.fromstring(_patched_xml(category, False))
    outer = root.find("worldbody/body")
    out: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    for part in outer.findall(".//body"):
        sites = part.findall(".//site")
        if not sites:
            break
        joints = tuple(j.get("name") for j in part.findall("./joint"))
        for s in sites:
            out[s.get("name")] = (part.get("name"), joints)
    return out


def clone(spec: mujoco.MjSpec) -> mujoco.MjSpec:
    return copy.deepcopy(spec)
