"""The phases of a LIBERO goal, for the critic's segmentation (issue 30 item 2).

Our families own their phases (`coda.sim.tasks.phases`); a LIBERO task's come from its
resolved goal atoms (`predicates.resolve`, in the order the planner executes them,
`planner.order_atoms`), with the same predicates over `SimState`:

  a placement atom (On / In, something the gripper carries):
      reach   the object's centre between the open jaws, or already held (`jaws_around`)
      grasp   held: both pads on it, its centre between their faces or it is lifted
      lift    held with its bottom `LIFT_HEIGHT` off the table
      transport  over its target (`predicates.over_target`), held or set down there
      place   the atom holds, counted once the object has left the jaws (`released`: a
              carried object passing over its target is not placed)
  an articulation atom (Open / Close / TurnOn / TurnOff): one phase, the atom holds.

Phases of the second and later atoms carry ":<k>" (reach:2); the last phase's predicate is ν,
the whole goal (LIBERO's And), so a trace that completes every phase succeeded. The
predicates read the atoms' tracked-body indices, not roles: they close over the compiled
scene, so a segmenter is made per compiled task model.
"""

from __future__ import annotations

from coda.libero import predicates as P
from coda.libero.planner import order_atoms
from coda.sim import geometry as G
from coda.sim.tasks import phases as ph

PLACEMENTS = ("on_obj", "on_region", "in_region")


def _placement(i: int, atom: tuple, tag: str) -> list[ph.Phase]:
    held = lambda s, sym: G.grasped(s, i)  # noqa: E731 - one-line predicates
    return [
        ph.Phase(
            "reach" + tag,
            lambda s, sym: ph.jaws_around(s, i) | held(s, sym),
        ),
        ph.Phase(
            "grasp" + tag,
            lambda s, sym: held(s, sym) & (ph.between_pads(s, i) | G.lifted(s, i, ph.LIFT_HEIGHT)),
        ),
        ph.Phase("lift" + tag, lambda s, sym: held(s, sym) & G.lifted(s, i, ph.LIFT_HEIGHT)),
        ph.Phase("transport" + tag, lambda s, sym: P.over_target(s, atom)),
        ph.Phase(
            "place" + tag,
            lambda s, sym: P.atom_holds(s, atom),
            start=lambda s, sym: G.fingers_off(s, i),
        ),
    ]


def goal_phases(compiled) -> tuple[ph.Phase, ...]:
    """The ordered phases of a compiled LIBERO scene's goal (module doc); ν last."""
    atoms = order_atoms(tuple(compiled.success.keywords["atoms"]))
    out: list[ph.Phase] = []
    for k, atom in enumerate(atoms):
        tag = "" if k == 0 else f":{k + 1}"
        if atom[0] in PLACEMENTS:
            out += _placement(int(atom[1]), atom, tag)
        else:
            out.append(ph.Phase("move" + tag, lambda s, sym, a=atom: P.atom_holds(s, a)))
    last = out[-1]  # its own atom for a one-atom goal; the whole goal (ν) for a compound one
    out[-1] = ph.Phase(last.name, lambda s, sym: P.evaluate(s, sym, atoms=atoms), last.start)
    return tuple(out)


__all__ = ["PLACEMENTS", "goal_phases"]
