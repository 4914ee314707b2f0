"""A closed drawer with a handle too low for the hand across it, dragged open by friction.

Kitchen scene 1's bottom drawer (LIBERO-90): its handle bar is 4.6 cm over the table, the
middle drawer's bar 5.3 cm above it, and the bar stands 1.6 cm off the front. The hand
horizontal across the bar needs ~11 cm below it (`panda_articulate.HAND_SPAN`); pointing
down, its housing meets the middle drawer's bar and front; a fingertip (≥ 1.4 cm thick) does
not go into the 1.6 cm behind the bar with room to spare. So `PandaDrag` does not hold the
bar: the closed fingers, the hand tilted from pointing down with its top out of the cabinet,
are set on the bar's top with their lowest point (the outer edge of their bottom face) at the
bar's front edge, which keeps the housing clear under the middle drawer's bar; pressed down
lightly, they are moved out along the drawer's axis a little ahead of the bar, so that friction
takes the bar along (the slide has damping, no dry friction). The drag's aim follows the bar.
Measured on states 0-9 while it was built: tilts of 30-40 deg, presses of 8-16 mm and leads of
1.5-5 cm all open every state; a tilt of 45 deg 7 of 10, a lead of 1 cm none (the drawer does
not move); the fingers aimed 3 mm inside the edge, the housing pushes the middle drawer in by
1.7 mm, 3 mm outside it they slip off first in 7 of 10 (the retry succeeds).
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda_articulate as PA
from coda.libero import panda_planner as PP

TILT = np.deg2rad(35.0)  # the hand's tilt from pointing down, its top away from the cabinet
PRESS = 0.012  # m: the aim under the fingers' touching height on the bar's top
LEAD = 0.03  # m: the drag's aim ahead of the bar along the drawer's motion
OUT = 0.10  # m: in front of the bar where the hand comes down
EDGE_IN = 0.0  # m: the fingers' lowest point (their bottom face's outer edge, the hand tilted)
# this far inside the bar's front edge: the hand as far out as the bar holds it, its housing
# under the middle drawer's bar (with that point over the bar's middle, the housing pushed that
# drawer in by 1.7 mm)
OVER = 0.002  # m: the fingers over the bar's top coming in and before the press (the
# hand's housing then passes just under the middle drawer's bar)
SETTLED, PRESS_STEPS = 0.003, 5  # the press ends once the fingers have stopped this near its
# touching height, held that many steps
DRAG_STEPS = 200  # the most steps a drag may take
SLIPPED = 20  # steps without the drawer moving 1 mm: the fingers have slipped off, the run ends


class PandaDrag(PA.PandaDrawer):
    """A closed drawer with a low handle pulled open by friction on the bar's top (module
    doc). Made where `PandaDrawer` refuses such a drawer (`LowHandle`)."""

    def _too_low(self, m: mujoco.MjModel, d: mujoco.MjData) -> None:
        self.n_phases = 6

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        """`_Stage.step`; the drag (phase 4) ends near the goal, after `DRAG_STEPS`, or once
        the drawer has not moved for `SLIPPED` steps."""
        run = self.runs[b]
        if run.phase == 4:
            q = float(d.qpos[self.qadr])
            moved = run.fixed.setdefault("moved", [q, 0])  # last q that moved it 1 mm, steps since
            if abs(q - moved[0]) >= 0.001:
                moved[:] = [q, 0]
            moved[1] += 1
            drags = run.fixed["drags"] = run.fixed.get("drags", 0) + 1
            if self._to_go(d) < PA.FINE or drags >= DRAG_STEPS or moved[1] >= SLIPPED:
                run.phase, run.count, run.trail = 5, 0, []
            else:
                run.count = 0  # not a move: `MAX_MOVE` does not end it
        return super().step(env, b, d)

    def _phase(self, env, b, d, run):
        h, out = self._h(d), self.outward
        a, c = PA.DOWN * np.cos(TILT) - PA.horizontal(out) * np.sin(TILT), self.along
        top = float(h[2]) + self.top  # the bar's top
        if run.phase == 0:  # above the point in front of the bar
            return np.r_[(h + out * OUT)[:2], top + PA.HOVER], PA.CLOSE, a, c, PA.REACHED, 0
        # the fingers' lowest point from the grasp site, the hand tilted (fixed once there)
        low = run.fixed.get("low")
        if low is None:
            low = PP.lowest_point(env, d) - d.site_xpos[env.idx.site]
            low = low - (low @ self.along) * self.along  # the hand stays centred on the bar
            if run.phase >= 2:
                run.fixed["low"] = low
        on = h + out * (self.depth - EDGE_IN) - low  # the lowest point over the bar's front edge
        on[2] = top - low[2]
        if run.phase == 1:  # down in front of the bar, to just above its top
            front = h + out * OUT
            front[2] = on[2] + OVER
            return front, PA.CLOSE, a, c, PA.REACHED, 0
        if run.phase == 2:  # over the bar
            return on + PA.UP * OVER, PA.CLOSE, a, c, PA.FINE, 0
        if run.phase == 3:  # pressed onto it: the fingers stop on the bar, PRESS over the aim
            return on - PA.UP * PRESS, PA.CLOSE, a, c, PRESS + SETTLED, PRESS_STEPS
        if run.phase == 4:  # dragged out along the drawer's axis, the aim ahead of the bar;
            # ended by `step` (not a move towards a point: no stall, no `MAX_MOVE`)
            return on + out * LEAD - PA.UP * PRESS, PA.CLOSE, a, c, 0.0, DRAG_STEPS
        up = run.fixed.setdefault("up", d.site_xpos[env.idx.site] + PA.UP * PA.HOVER)
        return up, PA.CLOSE, a, c, PA.REACHED, 0
