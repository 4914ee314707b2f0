"""A labelled sheet of LIBERO source tasks beside edits of them (`coda.libero.program`), as
LIBERO's agent view shows them: for looking at what an edit does to the scene.

    python benchmarks/libero_edits_sheet.py --out benchmarks/results/libero_edits_sheet.png
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

from coda.libero import episodes as E  # noqa: E402
from coda.libero import render as R  # noqa: E402
from coda.libero import suites  # noqa: E402

# (suite, task id, edits): one row each, the source task first
ROWS = (
    ("libero_spatial", 0, ("swap(akita_black_bowl_1,plate_1)", "inst(akita_black_bowl_1,ketchup)")),
    ("libero_goal", 0, ("move(wine_bottle_1,main_table_stove_front_region)",
                        "goal(turnon,flat_stove_1)")),
    ("libero_object", 0, ("swap(alphabet_soup_1,basket_1)", "inst(alphabet_soup_1,bbq_sauce)")),
)  # fmt: skip
SIZE = 256


def _frame(program: str) -> tuple[np.ndarray, str]:
    c = E.compile_episode(program)
    suite, task = E.parse(program).task_ref
    model = R.render_model(suite, task)
    img = R.render_observations(model, c.init_qpos[None], size=SIZE, cameras=("agentview",))
    return img[0, 0], c.scene.task["instruction"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/libero_edits_sheet.png")
    a = ap.parse_args()
    cols = 1 + max(len(r[2]) for r in ROWS)
    sheet = Image.new("RGB", (cols * SIZE, len(ROWS) * (SIZE + 40)), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (suite, tid, edits) in enumerate(ROWS):
        task = suites.tasks(suite)[tid]
        for j, text in enumerate(("",) + edits):
            program = E.Episode(suite, task, 0, 0, text).program
            try:
                img, words = _frame(program)
            except ValueError as e:  # an edit the task refuses: shown as text
                img, words = np.full((SIZE, SIZE, 3), 255, np.uint8), str(e)[:60]
            x, y = j * SIZE, i * (SIZE + 40)
            sheet.paste(Image.fromarray(img), (x, y))
            draw.text((x + 4, y + SIZE + 2), (text or f"{suite} #{tid}")[:42], fill="black")
            draw.text((x + 4, y + SIZE + 20), words[:42], fill="gray")
    sheet.save(a.out)
    print(a.out)


if __name__ == "__main__":
    main()
