"""Carries a study's finished cells across machines: the files `launch.study` reads to skip a cell.

A study of many hours runs over sessions whose machines do not keep `runs/`. A finished cell is
its `summary.json` + `config.json` (+ `commit.txt`, the commit it ran at; `error.txt` when it
failed); copying them into the repository after each cell and back into a fresh workdir before a
restart resumes the study with at most the cell in progress lost. Files are copied, never
rewritten.

  python benchmarks/study_cells.py save    --workdir=runs/libero_pro_v4_spatial \
      --store=benchmarks/results/cells/libero_pro_v4_spatial
  python benchmarks/study_cells.py restore --workdir=runs/libero_pro_v4_spatial \
      --store=benchmarks/results/cells/libero_pro_v4_spatial \
      --config=configs/libero_study.py:pro_spatial

The store carries summaries, not checkpoints. A cell that other cells adopt round 0 from
(`loop.start_from`, `study.share_start`) is therefore restored only once every cell adopting it
has finished; before that it is withheld (`--config` names the study so that its cells' starts are
known), and the study reruns it from scratch at the same commit and seed. Its rerun summary is
compared with the stored one but for wall-clock fields: a stored summary is never overwritten; a
rerun with other outcomes is kept beside it as `summary.rerun.json` and reported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What makes a cell finished for `coda.study` (summary + config), and its provenance.
CELL_FILES = ("summary.json", "config.json", "commit.txt", "error.txt")


def finished_cells(root: str) -> list[str]:
    """`<strategy>/seed<k>` of every cell under `root` that has a summary and a config."""
    out = []
    if not os.path.isdir(root):
        return out
    for arm in sorted(os.listdir(root)):
        folder = os.path.join(root, arm)
        if not os.path.isdir(folder):
            continue
        for sd in sorted(os.listdir(folder)):
            cdir = os.path.join(folder, sd)
            if sd.startswith("seed") and all(
                os.path.exists(os.path.join(cdir, f)) for f in CELL_FILES[:2]
            ):
                out.append(os.path.join(arm, sd))
    return out


def copy_cells(src: str, dst: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Copies the finished cells' files from `src` to `dst` (but `skip`); returns the cells
    copied. A cell already in `dst` with the same outcomes (`_outcomes`: its summary but for
    wall-clock fields) is left alone; one with other outcomes keeps its summary, and the new
    one is copied beside it as `summary.rerun.json`."""
    copied = []
    for cell in finished_cells(src):
        if cell in skip:
            continue
        a, b = os.path.join(src, cell), os.path.join(dst, cell)
        if os.path.exists(os.path.join(b, "summary.json")):
            new = _bytes(os.path.join(a, "summary.json"))
            if _outcomes(new) == _outcomes(_bytes(os.path.join(b, "summary.json"))):
                continue
            rerun = os.path.join(b, "summary.rerun.json")
            if not (os.path.exists(rerun) and _bytes(rerun) == new):
                shutil.copyfile(os.path.join(a, "summary.json"), rerun)
                copied.append(f"{cell} (rerun differs: summary.rerun.json)")
            continue
        os.makedirs(b, exist_ok=True)
        for f in CELL_FILES:
            if os.path.exists(os.path.join(a, f)):
                shutil.copyfile(os.path.join(a, f), os.path.join(b, f))
        copied.append(cell)
    return copied


def load_study(spec: str):
    """The study config `FILE[:ARG]` (FILE relative to this repository), loaded as
    `launch.study --config=` loads it (`launch.cli.check_config_arg`)."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from launch.cli import check_config_arg

    return check_config_arg(os.path.join(REPO, spec))


def starts_needed(config, workdir: str, store: str) -> list[str]:
    """`<strategy>/seed<k>` of every cell that a cell not finished in `store` adopts round 0
    from (`loop.start_from`) and whose round 0 is not in `workdir`."""
    from coda import study
    from coda.loop import checkpoint

    done = set(finished_cells(store))
    out = []
    for strategy, seed in study.cells(config):
        start = study.cell_config(config, strategy, seed, workdir).loop.get("start_from", "")
        if not start or os.path.join(strategy, f"seed{seed}") in done:
            continue
        cell = os.path.relpath(start, workdir)
        marker = os.path.join(checkpoint.round_dir(start, 0), checkpoint.MARKER)
        if not os.path.exists(marker) and cell not in out:
            out.append(cell)
    return out


TIMING = ("seconds", "hours")  # summary keys holding wall-clock measurements, not outcomes


def _outcomes(raw: bytes):
    """A summary without its wall-clock fields (keys containing `TIMING`), NaN as a string:
    what a rerun at the same commit and seed must reproduce."""

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if not any(t in k for t in TIMING)}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return "nan" if isinstance(x, float) and x != x else x

    return strip(json.loads(raw))


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("action", choices=("save", "restore"), help="save: workdir -> store")
    p.add_argument("--workdir", required=True, help="the study's workdir (runs/...)")
    p.add_argument("--store", required=True, help="the folder in the repository")
    p.add_argument(
        "--config", default="", help="restore: the study's FILE[:ARG], to withhold needed starts"
    )
    a = p.parse_args(argv)
    src, dst = (a.workdir, a.store) if a.action == "save" else (a.store, a.workdir)
    held = []
    if a.action == "restore" and a.config:
        held = starts_needed(load_study(a.config), a.workdir, a.store)
    copied = copy_cells(src, dst, skip=tuple(held))
    print(f"{a.action}: {len(copied)} cell(s) copied {src} -> {dst}: {', '.join(copied) or '-'}")
    if held:
        why = "other cells adopt their round 0; the study reruns them"
        print(f"withheld ({why}): {', '.join(held)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
