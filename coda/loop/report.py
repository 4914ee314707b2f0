"""Run report: summary.json, report.md, report.html, plots, failure GIFs beside ψ, costs.

Everything here is regenerated from the run folder's records (`RunState.history`, memory, the
saved failure traces), so a resumed run reports exactly what an uninterrupted one would.
"""

from __future__ import annotations

import html
import json
import math
import os
from typing import Any

import numpy as np
from absl import logging
from ml_collections import ConfigDict

from coda.loop.evaluation import learning
from coda.loop.failure_media import failure_media
from coda.loop.strategies import get_strategy

# Paper reference for the cost table (per 1,000 accepted environments).
PAPER_PER_1000 = {"llm_tokens": 7.4e6, "accelerator_hours": 66.0}


def what_ran(config: ConfigDict) -> dict[str, Any]:
    """Which policies this run trained / evaluated (so planner success is not read as learning)."""
    s = get_strategy(config.strategy)
    return {
        "strategy": s.name,
        "strategy_kind": s.kind,
        "description": s.description,
        "scripted_planner": "demos only (privileged; BC targets and the pool's solvability)",
        "learned_policy": s.update.trains or s.start.clones,
        "critic": s.critique.critic_name(config),
        "engine": config.engine.name,
        "memory": s.memory.name,
        "potential": s.potential.name,
    }


def costs(budgets: dict, llm: dict | None, accelerator: bool) -> dict[str, Any]:
    """LLM tokens and $ per role, sim steps / sim-hours, accelerator-hours; each per 1,000
    accepted environments. Sim time = env steps x 0.004 s (MuJoCo timestep of the scenes)."""
    accepted = max(int(budgets.get("scenes_accepted", 0)), 1)
    per = 1000.0 / accepted
    llm = llm or {}
    tokens = int(sum(v.get("tokens", 0) for v in llm.values()))
    dollars = float(sum(v.get("usd", 0.0) for v in llm.values()))
    compute_h = (budgets.get("rollout_seconds", 0.0) + budgets.get("update_seconds", 0.0)) / 3600
    sim_h = budgets.get("env_steps", 0) * 0.004 / 3600
    return {
        "accepted_environments": int(budgets.get("scenes_accepted", 0)),
        "llm_per_role": llm,
        "llm_tokens": tokens,
        "llm_usd": dollars,
        "env_steps": int(budgets.get("env_steps", 0)),
        "sim_hours": sim_h,
        "accelerator_hours": compute_h if accelerator else 0.0,
        "cpu_compute_hours": 0.0 if accelerator else compute_h,
        "per_1000_accepted": {
            "llm_tokens": tokens * per,
            "llm_usd": dollars * per,
            "env_steps": budgets.get("env_steps", 0) * per,
            "sim_hours": sim_h * per,
            "compute_hours": compute_h * per,
        },
    }


# ----------------------------------------------------------------------------- plots


def _plots(workdir: str, history: list[dict]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pdir = os.path.join(workdir, "plots")
    os.makedirs(pdir, exist_ok=True)
    out = {}
    rows = [h for h in history if "suites" in h]
    if rows:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        names = list(rows[0]["suites"]) + ["ood"]
        for n in names:
            pts = [
                (h["round"], h["ood"] if n == "ood" else h["suites"].get(n))
                for h in rows
                if (h.get("ood") if n == "ood" else h["suites"].get(n))
            ]
            pts = [(r, d) for r, d in pts if d.get("n", 0) > 0]
            if not pts:
                continue
            x = [r for r, _ in pts]
            y = np.array([d["rate"] for _, d in pts])
            e = np.array([d["se"] for _, d in pts])
            style = "-o" if n in ("id", "ood") else "--."
            ax.errorbar(
                x, y, yerr=e, fmt=style, capsize=3, label=n, lw=2 if n in ("id", "ood") else 1
            )
        ax.set_xlabel("round")
        ax.set_ylabel("success (± s.e.)")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=7, ncol=2)
        ax.set_title("Success per round: ID and OOD")
        fig.tight_layout()
        out["success"] = _save(fig, pdir, "success.png", workdir)
    alloc = [h for h in history if h.get("allocation")]
    if alloc:
        keys = sorted({k for h in alloc for k in h["allocation"]}, key=str)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        bottom = np.zeros(len(alloc))
        x = [h["round"] for h in alloc]
        for k in keys:
            v = np.array([h["allocation"].get(k, 0) for h in alloc], float)
            ax.bar(x, v, bottom=bottom, label=f"mode {k}" if k.isdigit() else k)
            bottom += v
        ax.set_xlabel("round")
        ax.set_ylabel("scenes")
        ax.set_title("Budget allocation per mode")
        ax.legend(fontsize=7, ncol=3)
        fig.tight_layout()
        out["allocation"] = _save(fig, pdir, "allocation.png", workdir)
    ref = [h for h in history if h.get("refutation_rate") or h.get("critique")]
    if ref:
        fig, ax = plt.subplots(figsize=(6, 3))
        x = [h["round"] for h in ref]
        v = [len(h.get("critique", {}).get("validated", [])) for h in ref]
        r = [len(h.get("critique", {}).get("refuted", [])) for h in ref]
        ax.bar(np.array(x) - 0.2, v, 0.4, label="validated")
        ax.bar(np.array(x) + 0.2, r, 0.4, label="refuted")
        ax.set_xlabel("round")
        ax.set_ylabel("candidate modes")
        ax.set_title("Control validation: validated vs refuted")
        ax.legend(fontsize=7)
        fig.tight_layout()
        out["refutations"] = _save(fig, pdir, "refutations.png", workdir)
    return out


def _save(fig: Any, pdir: str, name: str, workdir: str) -> str:
    import matplotlib.pyplot as plt

    path = os.path.join(pdir, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.relpath(path, workdir)


# ----------------------------------------------------------------------------- text


def _fmt(d: dict | None) -> str:
    if not d or not d.get("n"):
        return "n/a"
    return f"{100 * d['rate']:.1f} ± {100 * d['se']:.1f} (n={d['n']})"


def _num(x: Any, p: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{p}f}" if isinstance(x, float) else str(x)


def _rounds_text(rounds: list[int]) -> str:
    if len(rounds) > 1 and rounds == list(range(rounds[0], rounds[-1] + 1)):
        return f"rounds {rounds[0]}–{rounds[-1]}"
    return ("rounds " if len(rounds) > 1 else "round ") + ", ".join(map(str, rounds))


def learning_line(lr: dict) -> str:
    """One line: the ID and pooled-OOD change of the late rounds over round 0."""
    if not lr or not lr.get("suites"):
        return "learning: fewer than two evaluated rounds"
    parts = []
    for name, label in (("id", "ID"), ("ood", "OOD")):
        x = lr["suites"].get(name)
        if x:
            parts.append(f"{label} {100 * x['delta']:+.1f} ± {100 * x['se']:.1f} ({x['reading']})")
    return f"learning ({_rounds_text(lr['late'])} vs round {lr['start']}): " + ", ".join(parts)


def _learning_section(lr: dict) -> list[str]:
    if not lr or not lr.get("suites"):
        return []
    paired = all(x["paired"] for x in lr["suites"].values())
    how = (
        "paired by episode (the suites are the same fixed episodes every round): Δ is the mean "
        "over episodes of (an episode's success rate over those rounds − its round-0 success), "
        "s.e. over episodes"
        if paired
        else "unpaired binomial difference (this run kept no per-episode outcomes)"
    )
    L = [
        "",
        f"## Did the policy learn? Round {lr['start']} against {_rounds_text(lr['late'])} pooled",
        "",
        f"{how}. up / down: |Δ| > 2 s.e.; flat: no change this run can detect.",
        "",
        f"| suite | round {lr['start']} % | {_rounds_text(lr['late'])} % | Δ points ± s.e. | "
        "reading |",
        "|---|---|---|---|---|",
    ]
    for name, x in lr["suites"].items():
        label = "OOD pooled" if name == "ood" else name
        L.append(
            f"| {label} | {100 * x['start']:.1f} | {100 * x['late']:.1f} | "
            f"{100 * x['delta']:+.1f} ± {100 * x['se']:.1f} | **{x['reading']}** |"
        )
    return L


def _header_section(summary: dict, config: ConfigDict) -> list[str]:
    ran = summary["what_ran"]
    trained = "trained" if ran["learned_policy"] else "not trained (start policy)"
    L = [
        f"# CoDA run report — strategy `{ran['strategy']}` ({ran['strategy_kind']})",
        "",
        f"{ran['description']}. Stopped: **{summary['stopped']}**. "
        f"Wall {summary['wall_seconds']:.0f} s, {summary['costs']['env_steps']:,} env steps, "
        f"backend {summary['backend']}.",
        "",
        "## What ran",
        "",
        f"- Learned policy: **{trained}** (`{config.policy.name}` structure, width "
        f"{config.policy.width}); every success number below is the learned policy's, "
        "measured by ν on fixed suites.",
        f"- Scenes: {_source_line(config)}.",
        f"- Scripted planner: {ran['scripted_planner']}.",
        f"- Critic: {ran['critic']}; engine: {ran['engine']}; memory: {ran['memory']}; "
        f"potential: {ran['potential']}.",
        "",
        "## Success per round (ID / OOD, % ± s.e.)",
        "",
    ]
    return L


def _success_section(summary: dict, plots: dict) -> list[str]:
    L: list[str] = []
    hist = summary["history"]
    suites = list(next((h["suites"] for h in hist if "suites" in h), {}))
    L += ["| round | " + " | ".join(suites) + " | OOD pooled |", "|---" * (len(suites) + 2) + "|"]
    for h in hist:
        if "suites" in h:
            cells = [_fmt(h["suites"].get(n)) for n in suites]
            L.append(f"| {h['round']} | " + " | ".join(cells) + f" | {_fmt(h.get('ood'))} |")
    pre = hist[0].get("untrained_id") if hist else None
    if pre:
        L += ["", f"Untrained policy on ID before BC (round 0): {_fmt(pre)}."]
    if "success" in plots:
        L += ["", f"![success]({plots['success']})"]
    L += _learning_section(summary.get("learning") or {})
    return L


def _rounds_section(hist: list[dict], plots: dict) -> list[str]:
    L: list[str] = []
    L += [
        "",
        "## Rounds",
        "",
        "| round | scenes (accepted/generated) | verification pass | coverage entropy | "
        "targeting precision | collect success | modes in band | critiqued | validated | refuted | "
        "refuted / tested this round, per critic |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for h in hist[1:]:
        c = h.get("critique", {})
        L.append(
            f"| {h['round']} | {h.get('accepted', 0)}/{h.get('generated', 0)} | "
            f"{_num(h.get('verification_pass_rate'))} | {_num(h.get('coverage_entropy'))} | "
            f"{_num(h.get('targeting_precision'))} | {_num(h.get('collect_success'))} | "
            f"{h.get('modes_in_band', 0)} | {c.get('critiqued', '–')} | "
            f"{len(c.get('validated', []))} | {len(c.get('refuted', []))} | "
            f"{_round_refutations(c.get('round_refutations'))} |"
        )
    if "allocation" in plots:
        L += ["", f"![allocation]({plots['allocation']})"]
    if "refutations" in plots:
        L += ["", f"![refutations]({plots['refutations']})"]
    ref = hist[-1].get("refutation_rate") if hist else None
    L += ["", f"Refutation rate per critic (last round): `{json.dumps(ref or {})}`", ""]
    return L


def _shares_section(hist: list[dict]) -> list[str]:
    """Each data source's share of the policy update's weight per round (own rollouts by the
    kind of scene, demo rows by where they came from: `coda.loop.demo_pool`), and how the chunk
    critic ranked the round's new chunks before training on them (`train.critic_quality`)."""
    ups = [(h["round"], h.get("update", {})) for h in hist[1:]]
    ups = [(r, u) for r, u in ups if u.get("shares") or u.get("critic_ranking")]
    if not ups:
        return []
    names = sorted({k for _, u in ups for k in u.get("shares", {})})
    names.sort(key=lambda k: k.startswith("demos"))
    L = ["", "## Where the gradient came from", ""]
    L += ["Share of the policy loss's total weight per data source (the loss is linear in the row"]
    L += ["weights), averaged over batches drawn as the round's updates draw them; the critic's"]
    L += ["AUCs rank the round's new chunks by success / by return before it trains on them.", ""]
    cols = names + ["critic AUC success", "critic AUC return"]
    L += ["| round | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for r, u in ups:
        sh, cr = u.get("shares", {}), u.get("critic_ranking", {})
        vals = [sh.get(k) for k in names] + [cr.get("auc_success"), cr.get("auc_return")]
        L.append(f"| {r} | " + " | ".join(_num(v) for v in vals) + " |")
    return L + [""]


def _round_refutations(counts: dict | None) -> str:
    """'critic: refuted/tested' per critic of a round's validation tests ('–': none tested)."""
    if not counts:
        return "–"
    return ", ".join(
        f"{k}: {v['refuted']}/{v['validated'] + v['refuted']}" for k, v in sorted(counts.items())
    )


_CORRECTION_NAMES = {"holm": "Holm", "bh": "Benjamini–Hochberg"}


def _test_line(t: dict, status: str) -> str:
    """One validation test: counts, raw p, adjusted p and which p decided (rows before
    corrections carry only the raw p, which decided)."""
    line = (
        f"- round {t['round']}, mode {t['mode']}: targeted {t['targeted']}/{t['n']}, "
        f"control {t['control']}/{t['n']}, p = {t['p_value']:.3f}"
    )
    how = t.get("correction", "none")
    if how != "none":
        name = _CORRECTION_NAMES.get(how, how)
        line += f", {name}-adjusted p = {t['p_adjusted']:.3f} over {t.get('n_tests', '?')} tests"
    decider = "adjusted p" if t.get("decided_by") == "p_adjusted" else "raw p"
    alpha = t.get("alpha")
    against = f" against α = {alpha:g}" if isinstance(alpha, (int, float)) else ""
    return line + f" → **{status}** (decided by the {decider}{against})"


def _modes_section(hist: list[dict]) -> list[str]:
    L: list[str] = []
    table = hist[-1].get("mode_table", []) if hist else []
    L += ["## Modes (semantic memory)", ""]
    if table:
        L += [
            "| id | factor | phase | cause | status | p̂ (success) | LP | diagnoses | trials |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for m in table:
            L.append(
                f"| {m['id']} | {m['factor']} | {m['phase']} | {m['cause'][:60]} | {m['status']} | "
                f"{_num(m['hardness'])} | {_num(m['lp'])} | {m['diagnoses']} | {m['trials']} |"
            )
    else:
        L.append("No modes (this strategy does not diagnose, or no failure was critiqued).")
    tests = [
        ({**v, "round": h["round"]}, status)
        for h in hist
        for status in ("validated", "refuted")
        for v in h.get("critique", {}).get(status, [])
    ]
    if tests:
        L += [
            "",
            "Validation tests (targeted vs control successes out of n, one-sided Fisher; raw p, "
            "the p adjusted over the round's tests, and which p was compared with α):",
            "",
        ]
        L += [_test_line(t, status) for t, status in tests]
    return L


def _failures_section(failures: list[dict]) -> list[str]:
    L: list[str] = []
    L += ["", "## Diagnosed failures (rollout beside the critic's ψ)", ""]
    L += [
        "Each failure: a GIF of every chunk endpoint and a keyframe sheet (workspace camera "
        "framed on the task's objects above the wrist camera; chunk and phase over each "
        "column). The views add a background and their own camera for people and the VLM "
        "critic only; the policy's observation cameras and the physics are unchanged.",
        "",
    ]
    if not failures:
        L.append("None saved.")
    for it in failures:
        d = it["diagnosis"]
        psi = f"δ={d.get('factor')}, p={d.get('phase')}, c={d.get('cause')}"
        gif = f"![failure]({it['gif']})" if "gif" in it else f"_(no GIF: {it.get('gif_error')})_"
        L += [
            f"- round {it['round']}, mode {it['mode']}: “{it['instruction']}” — ψ: {psi}",
            "",
            f"  {gif}",
            "",
        ]
        if "sheet" in it:
            L += [f"  ![keyframes: workspace and wrist views, chunk and phase]({it['sheet']})", ""]
    return L


def _costs_section(summary: dict, config: ConfigDict) -> list[str]:
    L: list[str] = []
    c = summary["costs"]
    p = c["per_1000_accepted"]
    acc_per = p["compute_hours"] if c["accelerator_hours"] else 0.0
    cpu_per = p["compute_hours"] if c["cpu_compute_hours"] else 0.0
    L += [
        "## Costs",
        "",
        f"Accepted environments: {c['accepted_environments']}.",
        "",
        "| quantity | total | per 1,000 accepted | paper per 1,000 |",
        "|---|---|---|---|",
        f"| LLM tokens | {c['llm_tokens']:,} | {p['llm_tokens']:,.0f} | "
        f"{PAPER_PER_1000['llm_tokens']:,.0f} |",
        f"| LLM $ | {c['llm_usd']:.2f} | {p['llm_usd']:.2f} | – |",
        f"| sim steps | {c['env_steps']:,} | {p['env_steps']:,.0f} | – |",
        f"| sim-hours (simulated time) | {c['sim_hours']:.3f} | {p['sim_hours']:.3f} | – |",
        f"| accelerator-hours | {c['accelerator_hours']:.3f} | {acc_per:.3f} | "
        f"{PAPER_PER_1000['accelerator_hours']} |",
        f"| CPU compute-hours (rollouts + updates) | {c['cpu_compute_hours']:.3f} | "
        f"{cpu_per:.3f} | – |",
        "",
        "LLM tokens per role: "
        + (
            json.dumps(c["llm_per_role"])
            if c["llm_per_role"]
            else "none (offline critic, engine and compiler: no LLM calls)"
        )
        + ".",
        "",
        "## Config",
        "",
        "```json",
        config.to_json_best_effort(indent=2),
        "```",
        "",
    ]
    return L


def markdown(summary: dict, plots: dict, failures: list[dict], config: ConfigDict) -> str:
    """report.md: what ran, success per round, learning, rounds, modes, failures, costs, config."""
    hist = summary["history"]
    L = _header_section(summary, config)
    L += _success_section(summary, plots)  # with "did the policy learn?"
    L += _rounds_section(hist, plots)
    L += _shares_section(hist)
    L += _modes_section(hist)
    L += _failures_section(failures)
    L += _costs_section(summary, config)
    return "\n".join(L)


def to_html(md: str, title: str) -> str:
    """A self-contained HTML page of the Markdown report (headings, tables, images, code)."""
    import re

    out, in_code, in_table = [], False, False
    for line in md.splitlines():
        if line.startswith("```"):
            out.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
            continue
        if in_code:
            out.append(html.escape(line))
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(set(c) <= set("-") for c in cells):
                continue
            if not in_table:
                out.append("<table>")
                in_table = True
            out.append("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        m = re.match(r"^(#+) (.*)", line)
        if m:
            n = len(m.group(1))
            out.append(f"<h{n}>{_inline(m.group(2))}</h{n}>")
        elif line.strip():
            out.append(f"<p>{_inline(line.lstrip('- '))}</p>")
    if in_table:
        out.append("</table>")
    style = (
        "body{font-family:sans-serif;max-width:1000px;margin:auto}"
        "td{border:1px solid #ccc;padding:2px 6px}table{border-collapse:collapse}"
        "img{max-width:100%}"
    )
    head = f"<meta charset='utf-8'><title>{html.escape(title)}</title><style>{style}</style>"
    body = "\n".join(out)
    return f"<!doctype html><html><head>{head}</head><body>\n{body}\n</body></html>\n"


def _inline(text: str) -> str:
    import re

    t = html.escape(text)
    t = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", r"<img alt='\1' src='\2'>", t)
    t = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return t


def write_report(workdir: str, config: ConfigDict, state: Any, svc: Any, wall: float) -> dict:
    """summary.json, report.md, report.html, plots/ and failure GIFs from the run state."""
    import jax

    hist = state.history
    budgets = dict(vars(state.budgets))
    accel = jax.default_backend() != "cpu"
    summary = {
        "what_ran": what_ran(config),
        "strategy": config.strategy,
        "backend": svc.backend.name,
        "devices": [str(d) for d in jax.devices()],
        "rounds": state.round,
        "stopped": state.stopped,
        "wall_seconds": wall,
        "costs": costs(budgets, budgets.get("llm"), accel),
        "final": hist[-1].get("suites") if hist else None,
        "history": hist,
    }
    summary["learning"] = learning(hist)
    last = next((h for h in reversed(hist) if "suites" in h), None)
    first = next((h for h in hist if "suites" in h), None)
    if last and first:
        summary["headline"] = (
            f"{config.strategy}: ID {_fmt(first['suites'].get('id'))} at round {first['round']}"
            f" -> {_fmt(last['suites'].get('id'))} at round {last['round']}; "
            f"OOD {_fmt(first.get('ood'))} -> {_fmt(last.get('ood'))}"
        )
        if summary["learning"]:
            summary["headline"] += "; " + learning_line(summary["learning"])
    else:
        summary["headline"] = f"{config.strategy}: no evaluation"
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    try:
        plots = _plots(workdir, hist)
    except Exception as e:  # noqa: BLE001 - the report still gets written, without plots
        logging.warning("plots failed: %s", e)
        plots = {}
    failures = failure_media(workdir, config)
    md = markdown(summary, plots, failures, config)
    with open(os.path.join(workdir, "report.md"), "w") as f:
        f.write(md)
    with open(os.path.join(workdir, "report.html"), "w") as f:
        f.write(to_html(md, f"CoDA run {config.strategy}"))
    with open(os.path.join(workdir, "costs.json"), "w") as f:
        json.dump(summary["costs"], f, indent=1)
    return summary


def _source_line(config: Any) -> str:
    """Where the run's scenes came from (`sim.source`), in words."""
    src = str(config.sim.get("source", "families"))
    if src == "families":
        return f"our task families {', '.join(config.sim.families)} (`sim.source=families`)"
    lib = config.libero
    tasks = f"tasks {lib.tasks}" if str(lib.tasks) else "all tasks"
    suite = src.removeprefix("libero:")
    return (
        f"LIBERO `{suite}`, {tasks} at initial states 0-{int(lib.train_states) - 1} "
        f"(held out from {int(lib.heldout_from)}); rounds buy layout-shifted states "
        f"(levels {', '.join(str(x) for x in lib.shift_levels)}); success as LIBERO counts it"
    )
