"""Engine G benchmark: targeted variants generated + verified per second, and the share of
generated variants that pass verification, per family.

For every family: P verified parents (`seed_scenes`), then for each representative mode
(δ, p, cause) the offline engine picks its program (`OfflineEngine.program_for`: the rule
table, falling back where the family lacks the roles) and `generate_targeted` makes B verified
variants. Reported per (family, mode): the program, attempted candidates, edits that could not
be made, verified candidates, the verified share (verified / attempted), the seconds and
variants/s (generation + compile + verification, engine time only: parents and the engine's
program choice excluded). The LLM path is measured once per family as well: the offline agent
(rule table written as SDK source) with its program run in the sandbox's subprocess worker
(one worker per batch), i.e. the cost an LLM-written program pays.

The critic half of the engine's throughput (offline diagnoses per second, counterfactual probes
included) is `benchmarks/critic.py` (results/critic.json); the whole chain end to end (critic ->
validation -> allocation -> Ω transfer) is tests/test_engine_planted.py.

Run:  python benchmarks/engine.py --out benchmarks/results/engine.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODES = (
    ("layout", "grasp", "collision_with_distractor"),
    ("layout", "reach", "beyond_reach"),
    ("attributes", "grasp", "object_too_wide"),
    ("attributes", "lift", "contact_lost"),
    ("task", "place", "misplaced"),
)
FAMILY_FINAL = {"articulated": "open"}  # the ν phase name where "place" does not exist


def _program_str(program) -> str:
    if program.source is not None:
        return program.source.strip()
    return "; ".join(e["edit"] + f"({e.get('role', '')})" for e in program.edits)


def run(families: list[str], n_parents: int, B: int, seed: int) -> dict:
    from coda.engine.engines import ModeSpec, make_engine
    from coda.engine.generate import generate_targeted
    from coda.engine.seeding import seed_scenes

    offline = make_engine("offline")
    out: dict = {}
    for fam in families:
        parents = seed_scenes(fam, n_parents, seed=seed)
        rows = {}
        tot_t = tot_att = tot_ver = tot_kept = 0.0
        for factor, phase, cause in MODES:
            if factor == "task" and fam in FAMILY_FINAL:
                phase = FAMILY_FINAL[fam]
            mode = ModeSpec(factor, phase, cause)
            program = offline.program_for(mode, parents, seed=seed)
            g = generate_targeted(mode, program, parents, B, seed=seed, strict=False)
            kept = sum(v.kind == "targeted" for v in g.variants)
            rows[f"{factor}/{phase}/{cause}"] = {
                "program": _program_str(program),
                "rule": program.note,
                "attempted": g.attempted,
                "edit_failures": g.edit_failures,
                "verified": g.verified,
                "kept": kept,
                "pass_share": round(g.pass_rate, 4),
                "rejected_by": dict(g.rejected),
                "seconds": round(g.seconds, 3),
                "variants_per_s": round(kept / g.seconds, 2),
            }
            tot_t += g.seconds
            tot_att += g.attempted
            tot_ver += g.verified
            tot_kept += kept
        llm = make_engine("llm", probe_variants=2)  # offline agent; sandbox subprocess
        mode = ModeSpec(*MODES[2])
        t0 = time.perf_counter()
        program = llm.program_for(mode, parents, seed=seed)
        t_prog = time.perf_counter() - t0
        g = generate_targeted(mode, program, parents, B, seed=seed, strict=False)
        kept = sum(v.kind == "targeted" for v in g.variants)
        out[fam] = {
            "parents": len(parents),
            "modes": rows,
            "offline": {
                "variants_per_s": round(tot_kept / tot_t, 2),
                "pass_share": round(tot_ver / max(tot_att, 1), 4),
                "kept": int(tot_kept),
                "seconds": round(tot_t, 3),
            },
            "llm_offline_agent_subprocess": {
                "mode": "/".join(MODES[2]),
                "program": _program_str(program),
                "program_seconds": round(t_prog, 3),
                "attempts": len(llm.attempts),
                "kept": kept,
                "pass_share": round(g.pass_rate, 4),
                "seconds": round(g.seconds, 3),
                "variants_per_s": round(kept / g.seconds, 2),
            },
        }
        print(
            f"{fam:16s} offline {out[fam]['offline']['variants_per_s']:6.2f} variants/s, "
            f"pass {out[fam]['offline']['pass_share']:.3f} | llm-agent (subprocess) "
            f"{out[fam]['llm_offline_agent_subprocess']['variants_per_s']:.2f} variants/s",
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default="pick_place,put_inside,stack_or_insert,articulated")
    ap.add_argument("--parents", type=int, default=4)
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/engine.json")
    a = ap.parse_args()
    t0 = time.perf_counter()
    res = run(a.families.split(","), a.parents, a.B, a.seed)
    doc = {
        "command": "python " + " ".join(sys.argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs ({platform.platform()})",
        "note": (
            "CPU only; engine time = edits + compile + batched verification; the machine was "
            "shared with other jobs, so rates are lower bounds"
        ),
        "B": a.B,
        "parents_per_family": a.parents,
        "families": res,
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
