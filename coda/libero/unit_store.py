"""The finished units of a Panda evaluation (`evaluate_panda.Unit`: one batch of one task's
initial states), kept in its run folder as they finish, so that the same command, run again
after an interruption, goes on after them: a unit's outcomes depend only on itself, so the
results are those of an uninterrupted run.

`units.jsonl`: a header line with the evaluation's config (the fields that change an outcome),
then one line per finished unit: its key (task id, batch index, initial states) and
`run_unit`'s result. A folder that holds another evaluation is refused (one line naming the
fields that differ), never overwritten; a line cut short by a crash is dropped.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

FILE = "units.jsonl"
IGNORED = ("panda.workers", "gifs", "gif_size")  # fields that change how, not what, it runs


class OtherEvaluation(ValueError):
    """The run folder holds units of an evaluation with another config."""


def fingerprint(config: Any) -> dict:
    """The config's fields as dotted keys, less `IGNORED`."""
    out: dict = {}

    def walk(node: dict, prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            elif f"{prefix}{k}" not in IGNORED:
                out[f"{prefix}{k}"] = v

    walk(json.loads(config.to_json()), "")
    return out


def key_of(k: int, batch: int, indices) -> tuple:
    return (int(k), int(batch), tuple(int(i) for i in indices))


class UnitStore:
    """`units.jsonl` of one run folder for one evaluation config."""

    def __init__(self, folder: str | pathlib.Path, config: Any):
        self.path = pathlib.Path(folder) / FILE
        self.config = fingerprint(config)

    def load(self) -> dict[tuple, dict]:
        """key -> result of every unit finished in this folder; a new folder gets its header.
        OtherEvaluation where the folder's header names another config."""
        if not self.path.exists():
            self.path.write_text(json.dumps({"config": self.config}) + "\n")
            return {}
        text = self.path.read_text()
        lines = text.split("\n")
        try:
            header = json.loads(lines[0])["config"]
        except (ValueError, KeyError, TypeError):
            raise OtherEvaluation(f"{self.path}: not a units file of an evaluation") from None
        if header != self.config:
            diff = sorted(k for k in set(header) | set(self.config)
                          if header.get(k) != self.config.get(k))  # fmt: skip
            raise OtherEvaluation(
                f"{self.path.parent} holds an evaluation whose config differs in "
                f"{', '.join(diff)}; use another --workdir (or move that one away)"
            )
        done, good = {}, len(lines[0]) + 1
        for line in lines[1:]:
            try:
                row = json.loads(line)
                done[key_of(*row["key"])] = row["result"]
            except (ValueError, KeyError, TypeError):
                break  # cut short by a crash: dropped, with anything after it
            good += len(line) + 1
        if good < len(text):
            with open(self.path, "r+") as f:
                f.truncate(good)
        return done

    def add(self, key: tuple, result: dict) -> None:
        """Appends one finished unit (flushed to disk before it returns)."""
        k, batch, indices = key
        line = json.dumps({"key": [k, batch, list(indices)], "result": result})
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
