"""Checks on a compiled training program: runtime, range, tracing, usefulness, completion.

Every failed check is a structured ``CheckFailure(stage, message, details)`` that goes back to
the compiler R_hone for repair (and into memory Φ with the attempt). Stages, in check order:

* ``compiler``: the compiler produced no program (e.g. the LLM call failed).

* ``syntax`` / ``validate`` / ``trace``: from ``compile_program`` (see ``program.py``).
* ``runtime``: evaluating Φ on the supplied rollout states raised, or a subgoal output is not
  finite (NaN/inf) on some state.
* ``range``: a raw subgoal potential left [0, 1] (Φ clips, but clipping would hide a bug).
* ``jit``: a tracer leaked (also checked at compile time), or Φ of a state depends on the other
  states of the batch (evaluated on the batch and on a remixed batch of the same shape), which
  would make ``jax.vmap`` of Φ disagree with batched evaluation.
* ``usefulness``: Φ does not rise along successful planner demonstrations: mean Spearman rank
  correlation of Φ with time over the chunk-endpoint states of successful demos (with
  ``until_success``, each up to its first state where ν holds) < threshold.
* ``completion``: on states where ν is true, the program has not completed its last stage.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coda import sandbox
from coda.potentials.program import LEAK_MESSAGE, Potential, ProgramError, is_leak_error
from coda.sim.state import SimState

__all__ = [
    "CHECK_STAGES",
    "CheckFailure",
    "CheckReport",
    "Demos",
    "check_program",
    "rank_correlation_with_time",
    "spearman",
]

CHECK_STAGES = (
    "compiler",
    "syntax",
    "validate",
    "trace",
    "runtime",
    "range",
    "jit",
    "usefulness",
    "completion",
)


@dataclasses.dataclass(frozen=True)
class CheckFailure:
    stage: str
    message: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stage not in CHECK_STAGES:
            raise ValueError(f"unknown check stage {self.stage!r}; valid: {CHECK_STAGES}")

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "message": self.message, "details": self.details}

    @classmethod
    def from_program_error(cls, e: ProgramError) -> CheckFailure:
        return cls(e.stage, e.message, {"line": e.line, **e.details})


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """Outcome of all checks on one program; ``failures`` empty iff ``ok``."""

    failures: tuple[CheckFailure, ...] = ()
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def first(self) -> CheckFailure | None:
        return self.failures[0] if self.failures else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "failures": [f.to_dict() for f in self.failures],
            "metrics": self.metrics,
        }


@dataclasses.dataclass(frozen=True)
class Demos:
    """Time-ordered rollout states for the checks.

    states: leaves [N, T, ...] (t=0 and every chunk endpoint); success: [N] bool (ν at the end,
    valid, not failed); nu: [N, T] bool, ν at every state (None: completion is not checked);
    until_success: usefulness reads each demo only up to its first ν state (`episode_ends`),
    for rollouts far longer than the task (LIBERO's step caps: a planner done in a third of
    the cap leaves two thirds of tied Φ = 1, which no Φ's rank correlation survives).
    """

    states: SimState
    success: np.ndarray
    nu: np.ndarray | None = None
    until_success: bool = False

    @classmethod
    def from_rollout(cls, result: Any, bucket: Any, until_success: bool = False) -> Demos:
        """From a ``RolloutResult`` of one bucket; padding variants are dropped."""
        keep = np.asarray(result.valid, bool)
        states = jax.tree_util.tree_map(lambda x: np.asarray(x)[keep], result.states)
        nu_fn = jax.vmap(lambda s: bucket.success(s, bucket.sym), in_axes=1, out_axes=1)
        nu = jax.jit(nu_fn)(jax.tree_util.tree_map(jnp.asarray, states))
        success = np.asarray(result.success, bool)[keep] & ~np.asarray(result.failed, bool)[keep]
        return cls(states, success, np.asarray(nu, bool), until_success)

    @property
    def num(self) -> int:
        return int(self.success.shape[0])

    def first_state(self) -> SimState:
        """One concrete state (e.g. for the sandbox probe). Leaves [1, ...]."""
        return jax.tree_util.tree_map(lambda x: np.asarray(x)[:1, 0], self.states)


# ----------------------------------------------------------------------------- statistics


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 with ties sharing their mean rank (as Spearman's ρ requires)."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), np.float64)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = 0.5 * (i + j)
        i = j + 1
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (Pearson on average ranks); 0 if either side is constant."""
    rx, ry = _average_ranks(x), _average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / den) if den > 0 else 0.0


def rank_correlation_with_time(phi: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray:
    """[N, T] potentials along N trajectories -> [N] Spearman ρ of Φ with time, over each
    trajectory's first `ends[i]` states (default: all T)."""
    phi = np.asarray(phi)
    ends = np.full(phi.shape[0], phi.shape[1]) if ends is None else np.asarray(ends)
    return np.array([spearman(p[:e], np.arange(e)) for p, e in zip(phi, ends, strict=True)])


def episode_ends(nu: np.ndarray) -> np.ndarray:
    """[N, T] ν -> [N] states up to and including the first where ν holds (T where it never
    does): the episode terminates there, so a success held afterwards adds only ties."""
    nu = np.asarray(nu, bool)
    first = np.where(nu.any(1), np.argmax(nu, 1) + 1, nu.shape[1])
    return np.maximum(first, np.minimum(2, nu.shape[1]))


# ----------------------------------------------------------------------------- checks


def _flatten(states: SimState) -> SimState:
    lead = states.ee_pos.shape[:-1]
    n = int(np.prod(lead))
    return jax.tree_util.tree_map(
        lambda x: np.asarray(x).reshape((n,) + tuple(x.shape[len(lead) :])), states
    )


def _error_failure(stage: str, e: BaseException) -> CheckFailure:
    if isinstance(e, ProgramError):
        return CheckFailure.from_program_error(e)
    if isinstance(e, sandbox.SandboxError):
        return CheckFailure(stage, e.reason, {"line": e.line, "sandbox_stage": e.stage})
    if is_leak_error(e):
        return CheckFailure("jit", LEAK_MESSAGE, {})
    msg = str(e).split("\n")[0][:400]
    return CheckFailure(stage, f"{type(e).__name__}: {msg}", {})


def _evaluate(potential: Potential, flat: SimState):
    """Raw outputs, Φ and k on the states [M], and Φ on a remixed batch of the same shape.

    The remixed batch repeats the first ⌈M/2⌉ states in its second half: a program that treats
    states independently gives the same Φ on the first half (one compiled function, no vmap
    trace). Vmappability itself is what this independence makes safe.
    """
    m = int(flat.ee_pos.shape[0])
    h = (m + 1) // 2
    idx = np.concatenate([np.arange(h), np.arange(m - h)])
    mixed = jax.tree_util.tree_map(lambda x: np.asarray(x)[idx], flat)

    def run(st: SimState):
        done, prog = potential.raw(st)
        phi, k = potential.combine(done, prog)
        return done, prog, phi, k

    fn = jax.jit(run)
    done, prog, phi, k = fn(flat)
    phi_mixed = fn(mixed)[2]
    return done, prog, phi, k, np.asarray(phi)[:h], np.asarray(phi_mixed)[:h]


def check_program(
    potential: Potential,
    states: SimState,
    success_mask: np.ndarray | None = None,
    nu: np.ndarray | None = None,
    *,
    min_rank_corr: float = 0.8,
    min_completion: float = 1.0,
    atol: float = 1e-5,
    until_success: bool = False,
) -> CheckReport:
    """Run the runtime and usefulness checks on time-ordered states [N, T, ...].

    ``success_mask`` [N] marks successful (planner) demos for the usefulness check; ``nu``
    [N, T] is ν per state for the completion check. Either may be None to skip that check.
    `until_success`: usefulness over each demo up to its first ν state (`Demos`).
    Stops at the first failing runtime stage (later checks would only repeat it).
    """
    metrics: dict[str, Any] = {"num_stages": potential.num_stages}
    lead = tuple(states.ee_pos.shape[:-1])
    if len(lead) != 2:
        raise ValueError(f"states must have leading dims [N, T]; got {lead}")
    n_traj, horizon = lead
    flat = _flatten(states)
    names = [s.name for s in potential.subgoals]
    try:
        done, prog, phi_j, stage, phi_a, phi_b = _evaluate(potential, flat)
    except Exception as e:  # noqa: BLE001 - untrusted code: every failure is a report
        return CheckReport((_error_failure("runtime", e),), metrics)
    done, prog = np.asarray(done), np.asarray(prog, np.float64)
    failure = _finite_failure(prog, names) or _range_failure(prog, names, atol)
    if failure is not None:
        return CheckReport((failure,), metrics)
    phi_e = np.asarray(phi_j)
    failure = _coupling_failure(phi_a, phi_b, metrics)
    if failure is not None:
        return CheckReport((failure,), metrics)
    phi = phi_e.reshape(n_traj, horizon)
    stage = np.asarray(stage).reshape(n_traj, horizon)
    metrics["phi_range"] = [float(phi.min()), float(phi.max())]
    metrics["initial_phi_max"] = float(phi[:, 0].max())
    failures: list[CheckFailure] = []
    nu = None if nu is None else np.asarray(nu, bool).reshape(n_traj, horizon)
    if success_mask is not None:
        ends = episode_ends(nu) if until_success and nu is not None else None
        failure = _usefulness_failure(phi, stage, success_mask, names, min_rank_corr, metrics, ends)
        if failure is not None:
            failures.append(failure)
    if nu is not None:
        failure = _completion_failure(
            stage, nu, potential.num_stages, names, min_completion, metrics
        )
        if failure is not None:
            failures.append(failure)
    return CheckReport(tuple(failures), metrics)


def _finite_failure(prog: np.ndarray, names: list[str]) -> CheckFailure | None:
    """``runtime``: a subgoal output that is not finite on some state."""
    bad = ~np.isfinite(prog)
    if not bad.any():
        return None
    k = int(np.argmax(bad.any(0)))
    return CheckFailure(
        "runtime",
        f"subgoal_{k}_potential ({names[k]!r}) is not finite on "
        f"{int(bad[:, k].sum())} of {len(prog)} states",
        {"subgoal": k, "n_bad": int(bad[:, k].sum())},
    )


def _range_failure(prog: np.ndarray, names: list[str], atol: float) -> CheckFailure | None:
    """``range``: a raw subgoal potential outside [0, 1] (beyond ``atol``)."""
    lo, hi = prog.min(0), prog.max(0)
    out = np.nonzero((lo < -atol) | (hi > 1 + atol))[0]
    if not len(out):
        return None
    k = int(out[0])
    return CheckFailure(
        "range",
        f"subgoal_{k}_potential ({names[k]!r}) must lie in [0, 1]; observed "
        f"[{lo[k]:.4g}, {hi[k]:.4g}] on rollout states",
        {"subgoal": k, "min": float(lo[k]), "max": float(hi[k])},
    )


def _coupling_failure(
    phi_a: np.ndarray, phi_b: np.ndarray, metrics: dict[str, Any]
) -> CheckFailure | None:
    """``jit``: Φ of a state differs between the batch and the remixed batch."""
    mism = float(np.max(np.abs(phi_a - phi_b), initial=0.0))
    metrics["batch_coupling_max_abs_diff"] = mism
    if not mism > 1e-5:  # not "<=": a NaN difference does not fail this check
        return None
    return CheckFailure(
        "jit",
        f"Φ of a state changes with the other states of the batch (max |Δ| "
        f"{mism:.3g}): the program must treat every state independently (index "
        "with [..., i], reduce over the last axes only), so Φ can be vmapped",
        {"max_abs_diff": mism},
    )


def _usefulness_failure(
    phi: np.ndarray,
    stage: np.ndarray,
    success_mask: np.ndarray,
    names: list[str],
    min_rank_corr: float,
    metrics: dict[str, Any],
    ends: np.ndarray | None = None,
) -> CheckFailure | None:
    """``usefulness``: Φ [N, T] does not rise with time along the successful demos (each up
    to its first ν state when `ends` says where, `episode_ends`)."""
    succ = np.asarray(success_mask, bool)
    metrics["num_successful_demos"] = int(succ.sum())
    if not succ.any():
        return None
    rho = rank_correlation_with_time(phi[succ], None if ends is None else ends[succ])
    metrics["final_phi_min"] = float(phi[succ, -1].min())
    metrics["rank_corr_mean"] = float(rho.mean())
    metrics["rank_corr_min"] = float(rho.min())
    if not rho.mean() < min_rank_corr:
        return None
    w = int(np.argmin(rho))
    worst = np.nonzero(succ)[0][w]
    return CheckFailure(
        "usefulness",
        f"Φ does not rise along successful demonstrations: mean Spearman ρ(Φ, t) "
        f"= {rho.mean():.3f} < {min_rank_corr} (worst {rho.min():.3f})",
        {
            "rank_corr": [round(float(r), 4) for r in rho],
            "worst_phi": [round(float(v), 3) for v in phi[worst]],
            "worst_stage": [int(v) for v in stage[worst]],
            "subgoals": names,
        },
    )


def _completion_failure(
    stage: np.ndarray,
    nu: np.ndarray,
    num_stages: int,
    names: list[str],
    min_completion: float,
    metrics: dict[str, Any],
) -> CheckFailure | None:
    """``completion``: where ν [N, T] holds, the last stage is not complete often enough."""
    n_nu = int(nu.sum())
    metrics["num_nu_states"] = n_nu
    if not n_nu:
        return None
    complete = stage[nu] == num_stages
    rate = float(complete.mean())
    metrics["completion_rate"] = rate
    if not rate < min_completion:
        return None
    stuck = np.bincount(stage[nu][~complete], minlength=num_stages)
    return CheckFailure(
        "completion",
        f"where ν (task success) holds, the last stage is complete on only "
        f"{rate:.1%} of {n_nu} states; states stop at subgoals "
        + ", ".join(f"{names[k]!r} ({int(c)})" for k, c in enumerate(stuck) if c),
        {"rate": rate, "stuck_at": {names[k]: int(c) for k, c in enumerate(stuck)}},
    )
