"""Planted-flaw benchmark for the VLM critic and the LLM engine, live or from recorded replies.

The planted flaws of `coda.sim.flaws.FLAWS` (benchmarks/critic_engine.py) with a model in the
loop. Per flaw: the flawed expert rolled out on `--n_diag` condition-true scenes; its failures (at
most `--max_failures`) diagnosed by `--critic` (vlm: `coda.critic.VLMCritic`, the readable
keyframes of `coda.critic.keyframes` + the state table; offline: `OfflineCritic` at the loop's
settings); reported per flaw: failures, rejected replies, factor / phase / both right. Then per
diagnosed mode (the `--max_modes` most frequent (factor, phase, cause) of the flaw) `--engine`
(llm: `coda.engine.llm_engine.LLMEngine`, which writes an edit program against the SDK; offline:
the rule table) writes the mode's program from the failures' scenes, and validation rolls the
flawed expert out on `--n_validate` targeted and control variants (one-sided Fisher, α = 0.05):
validated or refuted. The refutation rate per critic, right and wrong diagnoses apart, and the
tokens / cost of each role (`coda.llm` price table) close the report.

The endpoint is any OpenAI-compatible server: `--base_url` (or CODA_LLM_BASE_URL) and the key
from the variable `--api_key_env` names (OPENAI_API_KEY by default; local servers need none).
`--record FILE` writes every exchange to a reply file (JSON lines; overwritten), `--replay FILE`
serves them with no network and no key (`coda.llm.replies`: replies are keyed by the request's
text, images left out, so a file recorded on one machine replays on another whose GL renders a
few pixels differently). Without --base_url or --replay only offline parts run.

Compare critics on the same flaws (a user with a key), then reproduce offline:
  python benchmarks/critic_engine_vlm.py --critic vlm --engine llm \
      --base_url https://api.openai.com/v1 --critic_model gpt-4o --engine_model gpt-4o \
      --record benchmarks/results/replies_gpt-4o.jsonl --out /tmp/vlm_gpt-4o.json
  python benchmarks/critic_engine_vlm.py --critic vlm --engine llm \
      --replay benchmarks/results/replies_gpt-4o.jsonl --out /tmp/vlm_gpt-4o_replay.json
  python benchmarks/critic_engine_vlm.py --critic offline --engine offline  # the baseline
`--sheets DIR` also writes one keyframe sheet (PNG) per diagnosis.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.critic_engine import _commit, loop_config  # noqa: E402

ALPHA = 0.05


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--critic", choices=("vlm", "offline"), default="vlm")
    ap.add_argument("--engine", choices=("llm", "offline"), default="llm")
    ap.add_argument("--base_url", default=os.environ.get("CODA_LLM_BASE_URL", ""))
    ap.add_argument("--api_key_env", default="OPENAI_API_KEY")
    ap.add_argument("--critic_model", default="gpt-4o")
    ap.add_argument("--engine_model", default="gpt-4o")
    ap.add_argument("--record", default="", help="write every exchange to this reply file")
    ap.add_argument("--replay", default="", help="serve replies from this file (no network)")
    ap.add_argument("--flaws", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--n_diag", type=int, default=8, help="condition-true scenes rolled out")
    ap.add_argument("--max_failures", type=int, default=8, help="failures diagnosed per flaw")
    ap.add_argument("--max_modes", type=int, default=2, help="diagnosed modes tested per flaw")
    ap.add_argument("--n_validate", type=int, default=16, help="targeted (= control) variants")
    ap.add_argument("--num_chunks", type=int, default=0, help="0: the loop's sim.num_chunks")
    ap.add_argument("--image_size", type=int, default=0, help="0: the loop's critic.image_size")
    ap.add_argument("--max_attempts", type=int, default=3, help="LLM engine attempts per mode")
    ap.add_argument("--isolation", default="subprocess", help="sandbox of LLM-written programs")
    ap.add_argument("--max_retries", type=int, default=2)
    ap.add_argument("--sheets", default="", help="write a keyframe sheet per diagnosis here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    return ap.parse_args(argv)


def make_client(args: argparse.Namespace) -> tuple[Any, Any]:
    """(LLMClient or None, ReplyFile or None) for the roles that use a model."""
    from coda.llm import LLMClient, LLMConfig, OpenAICompatibleBackend, RoleConfig
    from coda.llm.replies import RecordingBackend, ReplayBackend, ReplyFile

    if args.critic != "vlm" and args.engine != "llm":
        return None, None
    if args.replay:
        replies = ReplyFile(args.replay)
        if not replies.entries:
            raise SystemExit(f"--replay {args.replay}: no recorded replies there")
        backend: Any = ReplayBackend(replies)
    elif args.base_url:
        backend = OpenAICompatibleBackend(base_url=args.base_url, api_key_env=args.api_key_env)
        replies = None
        if args.record:
            if os.path.exists(args.record):
                os.remove(args.record)  # a reply file holds one run
            replies = ReplyFile(args.record)
            backend = RecordingBackend(backend, replies)
    else:
        raise SystemExit(
            "--critic vlm / --engine llm need a model: --base_url URL (an OpenAI-compatible "
            "server; https://api.openai.com/v1 with OPENAI_API_KEY set) or --replay FILE. "
            "--critic offline --engine offline runs without one."
        )
    roles = {
        "critic": RoleConfig(backend="openai_compatible", model=args.critic_model),
        "engine": RoleConfig(backend="openai_compatible", model=args.engine_model),
    }
    cfg = LLMConfig(roles=roles, record_mode="off", max_retries=args.max_retries)
    return LLMClient(cfg, backends={"critic": backend, "engine": backend}), replies


def make_critic(args: argparse.Namespace, cfg: Any, client: Any, flaw: Any, backend: Any) -> Any:
    from coda.critic import OfflineCritic, VLMCritic

    if args.critic == "vlm":
        size = args.image_size or int(cfg.critic.image_size)
        return VLMCritic(
            client=client, max_keyframes=int(cfg.critic.max_keyframes), image_size=size
        )
    return OfflineCritic(
        policy=flaw.policy,
        params=None,
        backend=backend,
        num_chunks=num_chunks(args, cfg),
        n_probes=int(cfg.critic.n_probes),
        n_repeats=int(cfg.critic.n_repeats),
    )


def make_engine(args: argparse.Namespace, client: Any) -> Any:
    from coda.engine.engines import make_engine as engine_named
    from coda.engine.llm_engine import LLMEngine

    if args.engine == "llm":
        return LLMEngine(
            client, max_attempts=args.max_attempts, probe_variants=2, isolation=args.isolation
        )
    return engine_named("offline")


def num_chunks(args: argparse.Namespace, cfg: Any) -> int:
    return args.num_chunks or int(cfg.sim.num_chunks)


def flaw_failures(flaw: Any, backend: Any, args: argparse.Namespace, n_chunks: int, seed: int):
    """The flawed expert's failed episodes on condition-true scenes (≤ max_failures)."""
    import jax

    from coda.critic import episodes_from_rollout
    from coda.sim.flaw_check import flaw_scenes
    from coda.sim.rollout import make_buckets

    true, _ = flaw_scenes(flaw, args.n_diag, 0, seed=seed)
    key = jax.random.PRNGKey(seed)
    failures = []
    for i, bucket in enumerate(make_buckets(true[: args.n_diag], multiple_of=1)):
        r = backend.rollout(bucket, flaw.policy(bucket), None, jax.random.fold_in(key, i), n_chunks)
        failures += episodes_from_rollout(bucket, r)
    return failures[: args.max_failures]


def test_mode(mode: tuple, parents: list, flaw: Any, engine: Any, backend: Any, args, n_chunks):
    """The engine's program for one diagnosed mode, then targeted vs control on the flawed
    expert -> a row (validated / refuted / no program)."""
    import jax

    from coda.engine.engines import ModeSpec
    from coda.engine.generate import targeted_control_success
    from coda.engine.validate import one_sided_test

    factor, phase, cause = mode
    row: dict[str, Any] = {"mode": list(mode), "right": [factor, phase] == list(flaw.ground_truth)}
    row["parents"] = len(parents)
    spec = ModeSpec(factor, phase, cause)
    if factor == "execution":
        return {**row, "outcome": "untestable", "why": "execution names no scene factor"}
    before = len(getattr(engine, "attempts", []))
    try:
        program = engine.program_for(spec, parents, seed=args.seed)
    except Exception as e:  # noqa: BLE001 - LLMEngineError / NoProgram: recorded, not fatal
        return {**row, "outcome": "no_program", "why": f"{type(e).__name__}: {e}"[:500]}
    row["program"] = program.source or json.dumps(program.edits, default=str)
    if hasattr(engine, "attempts"):
        row["engine_attempts"] = len(engine.attempts) - before
    n = args.n_validate
    lc = loop_config().loop  # the loop's validation pairs (recreate, outside, keep by default)
    pairs = {
        "pairing": str(lc.validation_pairing),
        "control": str(lc.validation_control),
        "rest": str(lc.validation_rest),
        "evidence": parents,  # the diagnosed failures' own scenes
    }
    try:
        t, c = targeted_control_success(
            spec,
            parents,
            flaw.policy,
            None,
            backend,
            jax.random.PRNGKey(args.seed + 7),
            n_chunks,
            N=n,
            seed=args.seed,
            program=program,
            **pairs,
        )
    except Exception as e:  # noqa: BLE001 - GenerationError: too few verified pairs
        return {**row, "outcome": "no_batches", "why": f"{type(e).__name__}: {e}"[:500]}
    res = one_sided_test(int(t.sum()), n, int(c.sum()), n, method="fisher", alpha=ALPHA)
    return {
        **row,
        "outcome": "validated" if res.accepted else "refuted",
        "targeted_success": round(float(t.mean()), 3),
        "control_success": round(float(c.mean()), 3),
        "p": round(float(res.p_value), 4),
    }


def write_sheets(out: list, flaw: Any, sheets: str) -> list[str]:
    from coda.critic.keyframes import keyframe_sheet
    from coda.sim.render import save_png

    os.makedirs(sheets, exist_ok=True)
    paths = []
    for i, c in enumerate(out):
        if not c.ok:
            continue
        path = os.path.join(sheets, f"{flaw.name}_{i}.png")
        save_png(keyframe_sheet(c.episode, c.diagnosis.to_json()), path)
        paths.append(path)
    return paths


def run_flaw(flaw, backend, cfg, args, client, seed: int) -> dict:
    import jax

    n_chunks = num_chunks(args, cfg)
    failures = flaw_failures(flaw, backend, args, n_chunks, seed)
    critic = make_critic(args, cfg, client, flaw, backend)
    t0 = time.perf_counter()
    out = critic.diagnose(failures, jax.random.PRNGKey(seed + 10_000)) if failures else []
    t_diag = time.perf_counter() - t0
    ok = [c for c in out if c.ok]
    gt = tuple(flaw.ground_truth)
    modes = collections.Counter(
        (c.diagnosis.factor, c.diagnosis.phase, c.diagnosis.cause) for c in ok
    )
    engine = make_engine(args, client)
    tests = []
    for mode, _ in modes.most_common(args.max_modes):
        parents = [c.episode.scene for c in ok if (c.diagnosis.factor, c.diagnosis.phase,
                                                   c.diagnosis.cause) == mode]  # fmt: skip
        tests.append(test_mode(mode, parents, flaw, engine, backend, args, n_chunks))
    row = {
        "flaw": flaw.name,
        "family": flaw.family,
        "ground_truth": list(gt),
        "failures": len(failures),
        "diagnosed": len(ok),
        "rejected": [c.rejected for c in out if not c.ok],
        "factor_right": sum(c.diagnosis.factor == gt[0] for c in ok),
        "phase_right": sum(c.diagnosis.phase == gt[1] for c in ok),
        "both_right": sum((c.diagnosis.factor, c.diagnosis.phase) == gt for c in ok),
        "seconds_per_diagnosis": round(t_diag / len(out), 2) if out else None,
        "diagnoses": {"/".join(m): k for m, k in sorted(modes.items())},
        "modes": tests,
    }
    if args.sheets:
        row["sheets"] = write_sheets(out, flaw, args.sheets)
    return row


def totals(rows: list[dict], client: Any, replies: Any, args: argparse.Namespace) -> dict:
    """Accuracy, refutation rates (all / right / wrong diagnoses) and tokens + cost per role."""
    from coda.llm import DEFAULT_PRICES, estimate_cost

    t = {k: sum(r[k] for r in rows) for k in ("failures", "diagnosed", "factor_right",
                                              "phase_right", "both_right")}  # fmt: skip
    t["rejected"] = sum(len(r["rejected"]) for r in rows)
    tests = [m for r in rows for m in r["modes"] if m["outcome"] in ("validated", "refuted")]
    for name, sel in (("all", tests), ("right", [m for m in tests if m["right"]]),
                      ("wrong", [m for m in tests if not m["right"]])):  # fmt: skip
        ref = sum(m["outcome"] == "refuted" for m in sel)
        t[f"refutation_rate_{name}"] = round(ref / len(sel), 3) if sel else None
        t[f"tested_{name}"] = len(sel)
    t["no_program"] = sum(m["outcome"] == "no_program" for r in rows for m in r["modes"])
    if replies is not None:
        tok = replies.tokens()
        models = {"critic": args.critic_model, "engine": args.engine_model}
        for role, d in tok.items():
            d["cost_usd_at_list_price"] = estimate_cost(
                models.get(role, ""), d["prompt_tokens"], d["completion_tokens"], DEFAULT_PRICES
            )
        t["tokens"] = tok
        t["replay_misses"] = replies.misses
    if client is not None:
        t["usage"] = client.usage_summary()
    return t


def markdown(result: dict) -> str:
    a = result["args"]
    lines = [
        f"# Planted flaws: critic `{a['critic']}`, engine `{a['engine']}`",
        "",
        f"- command: `{result['command']}`",
        f"- commit: {result['commit']}; machine: {result['machine']}",
        f"- models: critic {a['critic_model']}, engine {a['engine_model']}"
        + (f" (replayed from {a['replay']})" if a["replay"] else ""),
        "",
        "| flaw | ground truth | failures | diagnosed | factor right | phase right | both "
        "| modes tested (mode: outcome, targeted / control success, p) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        modes = "; ".join(
            f"{'/'.join(m['mode'])}: {m['outcome']}"
            + (f" {m['targeted_success']} / {m['control_success']}, p={m['p']}" if "p" in m else "")
            for m in r["modes"]
        )
        lines.append(
            f"| {r['flaw']} | {'/'.join(r['ground_truth'])} | {r['failures']} | {r['diagnosed']} "
            f"| {r['factor_right']} | {r['phase_right']} | {r['both_right']} | {modes} |"
        )
    lines += ["", "Totals: `" + json.dumps(result["totals"], sort_keys=True) + "`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import jax

    cache = os.environ.get("CODA_JAX_CACHE", os.path.join(os.path.dirname(__file__), "..",
                                                          ".jax_cache"))  # fmt: skip
    jax.config.update("jax_compilation_cache_dir", cache)
    from coda.sim.flaws import FLAWS
    from coda.sim.rollout import make_backend

    cfg = loop_config()
    client, replies = make_client(args)
    backend = make_backend("native")
    chosen = [f for f in FLAWS if not args.flaws or f.name in args.flaws.split(",")]
    t0 = time.perf_counter()
    rows = []
    for i, flaw in enumerate(chosen):
        rows.append(run_flaw(flaw, backend, cfg, args, client, args.seed + i))
        print(json.dumps(rows[-1], default=str), flush=True)
    result = {
        "command": "python " + " ".join(sys.argv if argv is None else ["<main>", *argv]),
        "machine": f"{platform.node()} {platform.machine()} cpus={os.cpu_count()}",
        "commit": _commit(),
        "args": vars(args),
        "seconds": round(time.perf_counter() - t0, 1),
        "rows": rows,
        "totals": totals(rows, client, replies, args),
    }
    print(json.dumps(result["totals"], default=str))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, default=str)
        with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
            f.write(markdown(result))
    if args.replay and replies is not None and replies.misses:
        raise SystemExit(f"{replies.misses} requests had no recorded reply in {args.replay}")
    return result


if __name__ == "__main__":
    main()
