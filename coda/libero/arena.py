"""LIBERO's arenas for rendering: the floor, walls, backgrounds (kitchen, living room, study),
table visuals and lights each LIBERO problem class loads, from the asset wheel's scene XMLs.

LIBERO builds every task on a scene XML (`scenes/libero_*_style.xml`) with the floor and wall
textures its problem class names (`scene_properties`: floor / wall style), and places the
table's visuals where its arena class puts them (`TableArena.configure_location`: the table
body at the workspace offset less half its thickness, the box at the table's size, four
cylinder legs near the corners). Here the XML is loaded as LIBERO's arena class would load it,
its geoms made visual-only (our own table box and floor carry the physics), its collision-only
geoms and cameras dropped (LIBERO sets the agent view per problem class:
`coda.libero.cameras`), and attached at LIBERO's world origin in our frame. Our own table,
floor and light are hidden where the arena brings its own.
"""

from __future__ import annotations

import dataclasses
import functools
import xml.etree.ElementTree as ET

import mujoco
import numpy as np

from coda.libero import data
from coda.sim.compile import TABLE_GEOM

# LIBERO's `arenas/style.py`: style name -> texture file (in assets/textures)
FLOOR_STYLE = {
    "light-gray": "light-gray-floor-tile.png",
    "gray-ceramic": "gray_ceramic_tile.png",
    "wood-plank": "seamless_wood_planks_floor.png",
}
WALL_STYLE = {
    "light-gray-plaster": "light-gray-plaster.png",
    "yellow-linen": "yellow_linen_wall_texture.png",
}


@dataclasses.dataclass(frozen=True)
class ArenaStyle:
    xml: str  # scene XML under assets/scenes (the problem class's default `scene_xml`)
    floor: str  # floor style (`scene_properties`)
    wall: str  # wall style
    table_body: str | None  # a TableArena-style table body placed by `configure_location`


ARENAS = {  # LIBERO's problem classes' defaults
    "libero_tabletop_manipulation": ArenaStyle(
        "libero_tabletop_base_style.xml", "light-gray", "light-gray-plaster", "table"
    ),
    "libero_kitchen_tabletop_manipulation": ArenaStyle(
        "libero_kitchen_tabletop_base_style.xml", "gray-ceramic", "yellow-linen", "table"
    ),
    "libero_living_room_tabletop_manipulation": ArenaStyle(
        "libero_living_room_tabletop_base_style.xml", "wood-plank", "light-gray-plaster", None
    ),
    "libero_study_tabletop_manipulation": ArenaStyle(
        "libero_study_base_style.xml", "light-gray", "light-gray-plaster", None
    ),
    "libero_floor_manipulation": ArenaStyle(
        "libero_floor_base_style.xml", "light-gray", "light-gray-plaster", None
    ),
}
LEG_RADIUS = 0.025  # m: TableArena's legs


@functools.lru_cache(maxsize=8)
def _arena_xml(style: ArenaStyle) -> str:
    """The scene XML with absolute file paths and the class's floor / wall textures."""
    path = data.assets_root() / "scenes" / style.xml
    root = ET.parse(path).getroot()
    for tex in root.iter("texture"):
        name, f = tex.get("name"), tex.get("file")
        if f is not None and name == "texplane":
            f = "../textures/" + FLOOR_STYLE[style.floor]
        elif f is not None and name == "tex-wall":
            f = "../textures/" + WALL_STYLE[style.wall]
        if f is not None:
            tex.set("file", f)
    for el in root.iter():
        f = el.get("file")
        if f is not None:
            el.set("file", str((path.parent / f).resolve()))
    ET.SubElement(root, "compiler", angle="radian")
    return ET.tostring(root, encoding="unicode")


def _place_table(child: mujoco.MjSpec, body: str, ws) -> None:
    """robosuite's `TableArena.configure_location` for the table's visual box and legs."""
    half = np.asarray(ws.size, float) / 2
    top = ws.top_z
    table = child.body(body)
    table.pos = [ws.offset[0], ws.offset[1], top - half[2]]
    legs = []
    for g in table.geoms:
        if g.name == "table_visual":
            g.size = half
        elif g.name.startswith("table_leg"):
            legs.append(g)
    z = (top - half[2]) / 2.0
    for leg, dx, dy in zip(legs, (0.1, -0.1, -0.1, 0.1), (0.1, 0.1, -0.1, -0.1), strict=True):
        x = np.sign(dx) * half[0] - dx if half[0] > abs(2 * dx) else 0.0
        y = np.sign(dy) * half[1] - dy if half[1] > abs(2 * dy) else 0.0
        leg.pos = [x, y, -z]
        leg.size = [LEG_RADIUS, z, 0.0]


def add_arena(spec: mujoco.MjSpec, task, origin: np.ndarray) -> None:
    """LIBERO's arena of the task's problem class into `spec` (visual only), LIBERO's world
    origin at `origin` in our frame; our table, floor and light hidden."""
    style = ARENAS.get(task.problem.problem)
    if style is None:
        return
    child = mujoco.MjSpec.from_string(_arena_xml(style))
    for cam in list(child.cameras):
        child.delete(cam)
    for g in list(child.geoms):
        if g.group == 0:  # collision-only boxes: our table carries the physics
            child.delete(g)
        else:
            g.contype = g.conaffinity = 0
    if style.table_body is not None:
        _place_table(child, style.table_body, task.workspace)
    frame = spec.worldbody.add_frame(pos=list(origin))
    spec.attach(child, prefix="arena/", frame=frame)
    for g in spec.geoms:
        if g.name in (TABLE_GEOM, "floor"):  # ours: physics only where the arena is drawn
            g.rgba = [g.rgba[0], g.rgba[1], g.rgba[2], 0.0]
    for light in list(spec.lights):
        if light.name == "top":
            spec.delete(light)
