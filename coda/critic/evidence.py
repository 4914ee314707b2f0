"""The offline critic's cause rules: a cause label from measured evidence in the stopped phase.

Inputs are an `Episode`'s per-endpoint features (`episode.trace_features`) and its scene. The
stopped phase p is where progress stopped (`Episode.stopped_at`); the window is the endpoints
from entering p to the end. Rules, first match wins (constants below; `CAUSES` in `types.py`
defines the labels):

0. the variant diverged (frozen by the rollout)                  -> simulation_unstable
1. every phase completed at some endpoint, ν false at the end    -> success_not_held
2. the object's start pose puts the wrist outside the reach box
   (`verify.reach_box`) by more than REACH_OUT                    -> beyond_reach
3. p is a reach phase:   a finger touched a distractor, or a distractor moved more than
   DISTRACTOR_MOVE, before the stop                                -> collision_with_distractor
                         else                                      -> did_not_approach
4. p is a grasp phase:   the object's narrowest horizontal width exceeds the robot's maximum
   gap (2·FINGER_OPEN) by WIDTH_MARGIN                             -> object_too_wide
                         both pads touched it but it was never held as the grasp phase
                         needs (`phases.grasp`: an object's centre between the pads' faces,
                         a handle spanning the jaws; as the lift rule below) -> never_grasped
                         its width exceeds the widest finger gap seen before the grasp by
                         WIDTH_MARGIN                              -> object_too_wide
                         distractor touched / moved before the object was touched
                                                                   -> collision_with_distractor
                         object slid more than PUSHED without being grasped
                                                                   -> object_pushed_away
                         one pad touched it                        -> one_finger_contact
                         else                                      -> no_finger_contact
5. p is a lift phase:    mass above the grip's capacity 2·μ·F/g (μ = max(pad, object) friction,
                         MuJoCo's default combination; F = finger force limit; both read from
                         the compiled model)                       -> object_too_heavy
                         both pads touched it, but at no such endpoint was it held (its
                         centre beside or below the pads' faces)    -> never_grasped
                         grasped, then no pad touching: let go     -> released_away_from_goal
                                                   lost            -> contact_lost
                         else                                      -> not_lifted
6. p is a transport phase: grasp ended after it held: let go      -> released_away_from_goal
                                                   lost            -> contact_lost
                         else (never at the destination, or carried across it and on)
                                                                   -> destination_not_reached
7. p is the final (ν) phase, articulated (a joint): grasp ended: let go
                                                                   -> released_away_from_goal
                                                   lost            -> contact_lost
                         joint moved less than JOINT_MOVE          -> joint_not_moving
                         else                                      -> joint_short_of_goal
   p is the final phase, placing: still held at the end, and the object is wider than the
                         widest gap commanded in the episode       -> object_too_wide
                         still held at the end                     -> not_released
                         out of the jaws, lost (not let go)        -> contact_lost
                         else                                      -> misplaced
8. a rule that found no fault (did_not_approach, no_finger_contact, not_lifted,
   destination_not_reached, not_released, joint_short_of_goal) becomes ran_out_of_time when
   progress advanced within the last RECENT endpoints (the episode was cut short, not stuck).

"Let go" vs "lost" (`let_go`) is read where the grasp ended (the first endpoint with no pad on
the object after the grasp): let go when the policy commanded the jaws open wider than the
object in the chunk that ended there (from its actions; without actions, when the measured gap
there grew by more than jaws.OPENED since the endpoint before, when it was still held), lost when
the jaws were still commanded closed on it (it left them: a slip or a drop). Which phase the
episode stopped in follows the phase rule of `coda.sim.tasks.phases`: a release beside the
destination stops in transport even if the object was carried across the destination before.

Phase kinds are read from the phase names (reach / grasp / lift / transport; the last phase is
ν); an unknown name before the last is treated as its position's generic kind "other" and
gets "other" unless rules 0-2 fire.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from coda.critic.episode import Episode
from coda.critic.jaws import grip_capacity, let_go, max_opening, object_mass, object_width
from coda.sim import robot
from coda.sim.tasks import phases as ph
from coda.sim.verify import reach_box

REACH_OUT = 0.01  # m the wrist would have to go beyond the reach box
DISTRACTOR_MOVE = 0.015  # m a distractor moved (xy) = something hit it
PUSHED = 0.02  # m the object slid (xy) without being grasped
WIDTH_MARGIN = 0.002  # m
JOINT_MOVE = 0.05  # joint fraction
RECENT = 2  # endpoints
JAW_MARGIN = ph.GRASP_MARGIN  # m the jaws closed narrower than the object: not between them
NO_FAULT = (
    "did_not_approach",
    "no_finger_contact",
    "not_lifted",
    "destination_not_reached",
    "not_released",
    "joint_short_of_goal",
)
KINDS = ("reach", "grasp", "lift", "transport")


@dataclasses.dataclass(frozen=True)
class Finding:
    """A cause label with its free text, the chunk endpoints that show it and the numbers."""

    cause: str
    text: str
    chunks: tuple[int, ...]
    numbers: dict[str, float]


def _first(mask: np.ndarray, start: int = 0) -> int | None:
    hit = np.nonzero(mask[start:])[0]
    return int(hit[0]) + start if hit.size else None


def phase_kind(ep: Episode) -> str:
    """reach / grasp / lift / transport / final / other for the stopped phase."""
    k = min(ep.stopped_at, len(ep.phase_names) - 1)
    if k == len(ep.phase_names) - 1:
        return "final"
    name = ep.phase_names[k]
    return name if name in KINDS else "other"


def _distractor_hit(ep: Episode, until: int) -> tuple[str, int, float] | None:
    """(object name, endpoint, displacement m) of the first distractor touched or moved by
    endpoint `until`, or None."""
    touch, disp = ep.features["d_touch"], ep.features["d_disp"]  # [T, K]
    best = None
    for k, (_, name) in enumerate(ep.roles.distractors):
        hit = touch[: until + 1, k] | (disp[: until + 1, k] > DISTRACTOR_MOVE)
        t = _first(hit)
        if t is not None and (best is None or t < best[1]):
            best = (name, t, float(disp[: until + 1, k].max()))
    return best


def infer_cause(ep: Episode) -> Finding:
    """The cause of a failed episode by the rules in this module's docstring."""
    f = ep.features
    t_last = ep.num_endpoints - 1
    t0 = ep.entered_stopped_phase()
    p = ep.stopped_phase
    num: dict[str, float] = {
        "stopped_at": float(ep.stopped_at),
        "entered_stopped_phase_at": float(t0),
        "min_tcp_gap_m": float(f["tcp_gap"].min()),
        "max_obj_height_m": float(f["obj_height"].max()),
    }
    if ep.sim_failed:
        return Finding("simulation_unstable", "the simulation diverged", (t_last,), num)
    if ep.stopped_at >= len(ep.phase_names):
        return Finding(
            "success_not_held",
            f"every phase completed by endpoint {t0} but ν is false at the end",
            (t0, t_last),
            num,
        )
    lo, hi = reach_box()
    wrist = np.asarray(ep.states.body_pos)[0, ep.roles.obj] + np.array([0, 0, robot.TCP_OFFSET])
    out_by = float(np.linalg.norm(np.maximum(lo - wrist, 0) + np.maximum(wrist - hi, 0)))
    if out_by > REACH_OUT:
        num["reach_excess_m"] = out_by
        return Finding(
            "beyond_reach",
            f"{ep.roles.obj_name} needs the wrist {out_by:.3f} m outside the reachable box",
            (0,),
            num,
        )
    finding = _phase_rules(ep, phase_kind(ep), t0, num)
    advanced = np.nonzero(np.diff(ep.phase_index) > 0)[0]
    if finding.cause in NO_FAULT and advanced.size and advanced[-1] + 1 >= t_last - RECENT + 1:
        num["last_progress_at"] = float(advanced[-1] + 1)
        return Finding(
            "ran_out_of_time",
            f"entered {p!r} at endpoint {advanced[-1] + 1} of {t_last}; no fault measured "
            f"({finding.cause} so far)",
            (int(advanced[-1] + 1), t_last),
            num,
        )
    return finding


def _phase_rules(ep: Episode, kind: str, t0: int, num: dict[str, float]) -> Finding:
    """The finding for the phase kind the episode stopped in: one rule set per kind, tried in
    this order; `num` collects the measured numbers the finding reports."""
    if kind == "reach":
        return _reach_rules(ep, num)
    if kind == "grasp":
        return _grasp_rules(ep, t0, num)
    if kind == "lift":
        return _lift_rules(ep, t0, num)
    if kind == "transport":
        return _transport_rules(ep, t0, num)
    if kind == "final" and "joint_frac" in ep.features:
        return _joint_final_rules(ep, t0, num)
    if kind == "final":
        return _final_rules(ep, t0, num)
    t_last = ep.num_endpoints - 1
    return Finding("other", f"no rule for phase {ep.stopped_phase!r}", (t0, t_last), num)


def _handle_reach(ep: Episode, t: int, num: dict[str, float]) -> Finding:
    """A handle never reached with the jaws open to take it: the tcp got to it (within
    REACH_MARGIN of its box) only with the jaws closed narrower than it (never_grasped when
    the pads touched it), or never got there (did_not_approach)."""
    f, obj = ep.features, ep.roles.obj_name
    width = object_width(ep)
    at = np.nonzero(f["tcp_gap"] <= ph.REACH_MARGIN)[0]
    if at.size == 0:
        return Finding(
            "did_not_approach",
            f"the tcp came no closer than {num['min_tcp_gap_m']:.3f} m to {obj}",
            (t,),
            num,
        )
    ta = int(at[0])
    num.update({"object_width_m": width, "opening_at_handle_m": float(f["opening"][ta])})
    touched = f["left"] | f["right"]
    cause = "never_grasped" if touched.any() else "did_not_approach"
    return Finding(
        cause,
        f"the tcp got to {obj} at endpoint {ta} with the jaws already closed to "
        f"{float(f['opening'][ta]):.3f} m ({width:.3f} m wide): never reached with them open",
        (ta,),
        num,
    )


def _contacts(ep: Episode) -> tuple[np.ndarray, np.ndarray]:
    """(grasped, touched) per endpoint: touched = either pad touches the object."""
    f = ep.features
    return f["grasped"], f["left"] | f["right"]


def _reach_rules(ep: Episode, num: dict[str, float]) -> Finding:
    """Stopped reaching: a distractor hit on the way, or the tcp never approached."""
    f, obj = ep.features, ep.roles.obj_name
    hit = _distractor_hit(ep, ep.num_endpoints - 1)
    if hit is not None:
        name, t, d = hit
        num["distractor_disp_m"] = d
        return Finding(
            "collision_with_distractor",
            f"the gripper hit {name} at endpoint {t} (moved {d:.3f} m) before reaching {obj}",
            (t,),
            num,
        )
    t = int(np.argmin(f["tcp_gap"]))
    if "obj_local" not in f or ep.roles.joint is not None:  # a handle: `phases.reach_open`
        return _handle_reach(ep, t, num)
    # reached = its centre between the open jaws (`phases.jaws_around`): where was it instead?
    local = f["obj_local"]
    t = int(np.argmin(np.linalg.norm(local, axis=-1)))
    x, y, z = (float(v) for v in local[t])
    num.update({"obj_in_tcp_x_m": x, "obj_in_tcp_y_m": y, "obj_in_tcp_z_m": z})
    lo, hi = ph.PAD_Z
    where = (
        f"{lo - z:.3f} m below the pads' lower edge (the hand stopped above it)"
        if z < lo
        else f"{z - hi:.3f} m above the pads (the hand came down over it)"
        if z > hi
        else f"{abs(x) - ph.PAD_FACE_X:.3f} m off the pads' face (in front of / behind them)"
        if abs(x) > ph.PAD_FACE_X
        else f"{abs(y):.3f} m to the side, outside the jaws' opening"
    )
    touched = f["left"] | f["right"]
    if touched.any():
        tt = int(np.nonzero(touched)[0][0])
        return Finding(
            "never_grasped",
            f"the pads touched {obj} at endpoint {tt} but its centre was never between the "
            f"open jaws: at its closest (endpoint {t}) it was {where}",
            (tt, t),
            num,
        )
    return Finding(
        "did_not_approach",
        f"{obj} was never between the open jaws: at its closest (endpoint {t}) its centre was "
        f"{where}; the tcp came no closer than {num['min_tcp_gap_m']:.3f} m to it",
        (t,),
        num,
    )


def _grasp_rules(ep: Episode, t0: int, num: dict[str, float]) -> Finding:
    """Stopped at the grasp: too wide, never between the jaws, a distractor hit, pushed away,
    one pad or none."""
    f, obj = ep.features, ep.roles.obj_name
    t_last = ep.num_endpoints - 1
    left, right = f["left"], f["right"]
    _, touched = _contacts(ep)
    width = object_width(ep)
    t_touch = _first(touched)
    before = t_last if t_touch is None else t_touch
    seen = max_opening(ep, before)
    num.update(
        {
            "object_width_m": width,
            "max_opening_m": seen,
            "gripper_max_opening_m": 2 * robot.FINGER_OPEN,
        }
    )
    # both pads on it but never between the jaws (closed early, pinching an edge): the grasp
    # phase's own test (`phases.between_jaws`); a width beyond the robot's reach stays too wide
    never = (
        None if width > 2 * robot.FINGER_OPEN + WIDTH_MARGIN else _never_between_jaws(ep, t0, num)
    )
    if never is not None:
        return never
    if width > min(seen, 2 * robot.FINGER_OPEN) + WIDTH_MARGIN:
        return Finding(
            "object_too_wide",
            f"{obj} is {width:.3f} m wide; the fingers opened to {seen:.3f} m "
            f"(max {2 * robot.FINGER_OPEN:.3f} m)",
            (before,),
            num,
        )
    hit = _distractor_hit(ep, before)
    if hit is not None:
        name, t, d = hit
        num["distractor_disp_m"] = d
        return Finding(
            "collision_with_distractor",
            f"the gripper hit {name} at endpoint {t} (moved {d:.3f} m) before the grasp",
            (t,),
            num,
        )
    num["max_obj_disp_m"] = float(f["obj_disp"].max())
    if num["max_obj_disp_m"] > PUSHED:
        t = _first(f["obj_disp"] > PUSHED) or 0
        return Finding(
            "object_pushed_away",
            f"{obj} slid {num['max_obj_disp_m']:.3f} m without being grasped",
            (t,),
            num,
        )
    n_left, n_right = int(left[t0:].sum()), int(right[t0:].sum())
    num.update({"left_contact_endpoints": float(n_left), "right_contact_endpoints": n_right})
    if n_left or n_right:
        t = _first(touched, t0) or t0
        return Finding(
            "one_finger_contact",
            f"only the {'left' if n_left else 'right'} pad touched {obj}",
            (t,),
            num,
        )
    return Finding(
        "no_finger_contact",
        f"no pad touched {obj} while in {ep.stopped_phase!r} (closest tcp gap "
        f"{float(f['tcp_gap'][t0:].min()):.3f} m)",
        (t0, t_last),
        num,
    )


def _lift_rules(ep: Episode, t0: int, num: dict[str, float]) -> Finding:
    """Stopped lifting: too heavy for the grip, contact lost, or not raised high enough."""
    f, obj = ep.features, ep.roles.obj_name
    grasped, touched = _contacts(ep)
    t_grasp = _first(grasped)
    cap, mu, force = grip_capacity(ep)
    mass = object_mass(ep)
    num.update({"mass_kg": mass, "grip_capacity_kg": cap, "grip_mu": mu, "finger_force_n": force})
    if mass > cap:
        return Finding(
            "object_too_heavy",
            f"{obj} weighs {mass:.2f} kg; a {force:.0f} N grip at μ={mu:.2f} holds {cap:.2f} kg",
            (t0,),
            num,
        )
    never = _never_between_jaws(ep, t0, num)
    if never is not None:
        return never
    lost = _lost_after(grasped, touched, t0)
    if lost is None:  # held only between endpoints (the grasp phase completed on the control
        lost = _first(~touched, t0)  # steps): the grip ended where no pad touches it
    if lost is not None:
        num["lift_height_at_loss_m"] = float(f["obj_height"][lost])
        where = (
            f"at endpoint {lost} while lifting (height {float(f['obj_height'][lost]):.3f} m, "
            f"needed {ph.LIFT_HEIGHT} m)"
        )
        chunks = (t_grasp if t_grasp is not None else t0, lost)
        if let_go(ep, lost, num):
            return Finding("released_away_from_goal", f"{obj} was let go {where}", chunks, num)
        return Finding("contact_lost", f"the grasp on {obj} was lost {where}", chunks, num)
    return Finding(
        "not_lifted",
        f"{obj} held but raised only {num['max_obj_height_m']:.3f} m",
        (t0, ep.num_endpoints - 1),
        num,
    )


def _transport_rules(ep: Episode, t0: int, num: dict[str, float]) -> Finding:
    """Stopped carrying: let go or lost on the way, or never kept at the destination (never
    over it, or carried across it and on)."""
    f, obj = ep.features, ep.roles.obj_name
    t_last = ep.num_endpoints - 1
    lost = _lost_after(*_contacts(ep), t0)
    if lost is not None:
        if "dest_dist" in f:
            num["dest_dist_at_loss_m"] = float(f["dest_dist"][lost])
        away = num.get("dest_dist_at_loss_m", float("nan"))
        if let_go(ep, lost, num):
            return Finding(
                "released_away_from_goal",
                f"the gripper opened and let go of {obj} at endpoint {lost}, {away:.3f} m (xy) "
                "from the destination's centre, not at the destination",
                (t0, lost),
                num,
            )
        return Finding(
            "contact_lost",
            f"{obj} left the closed jaws at endpoint {lost} while carried",
            (t0, lost),
            num,
        )
    if "dest_dist" in f:
        num["min_dest_dist_m"] = float(f["dest_dist"][t0:].min())
    passed = _first(f["over_dest"], t0) if "over_dest" in f else None
    if passed is not None:  # over it once, then carried on: passing over is not transport
        num["passed_over_at"] = float(passed)
        return Finding(
            "destination_not_reached",
            f"{obj} was carried across the destination at endpoint {passed} and on, not kept "
            f"there (at the end {float(f['dest_dist'][-1]):.3f} m (xy) from its centre)",
            (passed, t_last),
            num,
        )
    return Finding(
        "destination_not_reached",
        f"{obj} carried to within {num.get('min_dest_dist_m', float('nan')):.3f} m (xy) "
        "of the destination, never over it",
        (t0, t_last),
        num,
    )


def _joint_final_rules(ep: Episode, t0: int, num: dict[str, float]) -> Finding:
    """An articulated task at its final phase: contact lost, the joint stuck or short."""
    t_last = ep.num_endpoints - 1
    jf = ep.features["joint_frac"]
    moved = float(np.abs(jf[t0:] - jf[t0]).max())
    num.update({"joint_moved_frac": moved, "joint_frac_end": float(jf[-1])})
    lost = _lost_after(*_contacts(ep), t0)
    if lost is not None:
        if let_go(ep, lost, num):
            return Finding(
                "released_away_from_goal",
                f"the gripper opened and let go of the handle at endpoint {lost}, the joint at "
                f"{float(jf[lost]):.3f} of its range",
                (t0, lost),
                num,
            )
        return Finding(
            "contact_lost",
            f"the grasp on the handle was lost at endpoint {lost} while pulling",
            (t0, lost),
            num,
        )
    if moved < JOINT_MOVE:
        return Finding(
            "joint_not_moving",
            f"the handle was held but the joint moved only {moved:.3f} of its range",
            (t0, t_last),
            num,
        )
    return Finding(
        "joint_short_of_goal",
        f"the joint moved {moved:.3f} of its range and ended at {float(jf[-1]):.3f}",
        (t0, t_last),
        num,
    )


def _final_rules(ep: Episode, t0: int, num: dict[str, float]) -> Finding:
    """The final phase: still wedged or held at the end, or released off the destination."""
    f, obj = ep.features, ep.roles.obj_name
    t_last = ep.num_endpoints - 1
    if "dest_dist" in f:
        num["end_dest_dist_m"] = float(f["dest_dist"][-1])
    num["end_obj_height_m"] = float(f["obj_height"][-1])
    if bool(f["grasped"][-1]):
        width, seen = object_width(ep), max_opening(ep, t_last)
        num.update({"object_width_m": width, "max_opening_m": seen})
        if width > seen + WIDTH_MARGIN:
            return Finding(
                "object_too_wide",
                f"{obj} ({width:.3f} m) is still wedged between the fingers at the end: "
                f"they never opened wider than {seen:.3f} m",
                (t0, t_last),
                num,
            )
        return Finding("not_released", f"{obj} is still held at the end", (t0, t_last), num)
    lost = _lost_after(*_contacts(ep), t0)
    if lost is not None and not let_go(ep, lost, num):
        return Finding(
            "contact_lost",
            f"{obj} left the closed jaws at endpoint {lost} before it was put down",
            (t0, lost),
            num,
        )
    return Finding(
        "misplaced",
        f"{obj} released {num.get('end_dest_dist_m', float('nan')):.3f} m (xy) from the "
        f"destination's centre, bottom at {num['end_obj_height_m']:.3f} m",
        (t0, t_last),
        num,
    )


def _never_between_jaws(ep: Episode, t0: int, num: dict[str, float]) -> Finding | None:
    """never_grasped when both pads touched the object (from `t0` on, or at all) but at no such
    endpoint was it held as the grasp phase requires (`phases.grasp`): an object that rests on
    the table with its centre between the pads' faces (`centred`), a handle spanning the jaws
    (not closed more than JAW_MARGIN narrower than it); else None."""
    f, obj = ep.features, ep.roles.obj_name
    held = np.nonzero(f["grasped"][t0:])[0] + t0
    if held.size == 0:
        held = np.nonzero(f["grasped"])[0]
    if held.size == 0:
        return None
    width, gap = object_width(ep), float(f["opening"][held].max())
    if "joint_frac" not in f and "centred" in f:  # an object: its centre between the pads?
        if bool((f["centred"] & f["grasped"]).any()):  # held somewhere: a grasp was made
            return None
        num.update({"object_width_m": width, "centred_endpoints": 0.0})
        return Finding(
            "never_grasped",
            f"both pads touched {obj} but its centre was never between the pads' faces (jaws "
            "closed beside it, on its edge or above it)",
            (int(held[0]),),
            num,
        )
    if gap >= width - JAW_MARGIN:
        return None
    num.update({"object_width_m": width, "max_gap_while_touching_m": gap})
    return Finding(
        "never_grasped",
        f"both pads touched {obj} but the jaws were closed to {gap:.3f} m, narrower than its "
        f"{width:.3f} m width: it was never between them",
        (int(held[0]),),
        num,
    )


def _lost_after(grasped: np.ndarray, touched: np.ndarray, start: int) -> int | None:
    """First endpoint after a grasp (at or after `start`) with no pad touching the object."""
    tg = _first(grasped, start)
    if tg is None:
        tg = _first(grasped)
        if tg is None:
            return None
    return _first(~touched, tg + 1)
