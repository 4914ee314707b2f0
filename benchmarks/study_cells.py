"""Carries a study's finished cells across machines: the files `launch.study` reads to skip a cell.

A study of many hours runs over sessions whose machines do not keep `runs/`. A finished cell is
its `summary.json` + `config.json` (+ `commit.txt`, the commit it ran at; `error.txt` when it
failed); copying them into the repository after each cell and back into a fresh workdir before a
restart resumes the study with at most the cell in progress lost. Files are copied, never
rewritten.

  python benchmarks/study_cells.py save    --workdir=runs/libero_pro_v4_spatial \
      --store=benchmarks/results/cells/libero_pro_v4_spatial
  python benchmarks/study_cells.py restore --workdir=runs/libero_pro_v4_spatial \
      --store=benchmarks/results/cells/libero_pro_v4_spatial
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

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


def copy_cells(src: str, dst: str) -> list[str]:
    """Copies the finished cells' files from `src` to `dst`; returns the cells copied. A cell
    already in `dst` with the same summary is left alone."""
    copied = []
    for cell in finished_cells(src):
        a, b = os.path.join(src, cell), os.path.join(dst, cell)
        same = os.path.exists(os.path.join(b, "summary.json")) and _bytes(
            os.path.join(a, "summary.json")
        ) == _bytes(os.path.join(b, "summary.json"))
        if same:
            continue
        os.makedirs(b, exist_ok=True)
        for f in CELL_FILES:
            if os.path.exists(os.path.join(a, f)):
                shutil.copyfile(os.path.join(a, f), os.path.join(b, f))
        copied.append(cell)
    return copied


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("action", choices=("save", "restore"), help="save: workdir -> store")
    p.add_argument("--workdir", required=True, help="the study's workdir (runs/...)")
    p.add_argument("--store", required=True, help="the folder in the repository")
    a = p.parse_args(argv)
    src, dst = (a.workdir, a.store) if a.action == "save" else (a.store, a.workdir)
    copied = copy_cells(src, dst)
    print(f"{a.action}: {len(copied)} cell(s) copied {src} -> {dst}: {', '.join(copied) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
