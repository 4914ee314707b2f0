"""The LIBERO scripted planner beyond single On / In goals: the order of a compound goal's
atoms (no simulation), drawer / knob stages built from the compiled model, and one drawer-open
and one knob task solved natively on one initial state. Needs the `[libero]` extra."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.libero import planner as LP
from coda.libero import planner_articulated as LA
from coda.libero import planner_geometry as LG
from coda.libero import scene as S
from coda.libero import suites
from coda.sim import robot

OPEN = ("joint", "<", -0.14, (1,), True)
CLOSE = ("joint", ">", 0.0, (2,), False)
MW_CLOSE = ("joint", ">", -0.005, (0,), False)
TURN_ON = ("joint", ">=", 0.5, (3,), True)
TURN_OFF = ("joint", "<", 0.0, (3,), False)
IN = ("in_region", 0, 5, (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0), (0.03, 0.07, 0.1))
ON = ("on_obj", 1, (1,), 2, (2,))


def test_atom_actions_follow_libero_s_thresholds():
    assert [LP.atom_action(a) for a in (OPEN, CLOSE, MW_CLOSE, TURN_ON, TURN_OFF, IN, ON)] == [
        "open",
        "close",
        "close",
        "turnon",
        "turnoff",
        "in_region",
        "on_obj",
    ]


def test_compound_goals_open_and_turn_on_first_close_and_turn_off_last():
    # libero_10 "put the bowl in the bottom drawer and close it": placement before closing
    assert LP.order_atoms((CLOSE, IN)) == (IN, CLOSE)
    # "turn on the stove and put the moka pot on it", goal written the other way round
    assert LP.order_atoms((ON, TURN_ON)) == (TURN_ON, ON)
    # everything at once; placements keep the goal's order
    got = LP.order_atoms((TURN_OFF, ON, CLOSE, IN, OPEN, TURN_ON))
    assert got == (OPEN, TURN_ON, ON, IN, TURN_OFF, CLOSE)
    assert LP.order_atoms((IN, ON)) == (IN, ON)
    # "stack bowl 1 on bowl 2 and put bowl 2 in the tray (body 7)": bowl 2 moves first
    stack = ("on_obj", 1, (1,), 2, (2,))
    tray = ("in_region", 2, 7, (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0), (0.1, 0.1, 0.05))
    assert LP.order_atoms((stack, tray)) == (tray, stack)
    assert LP.order_atoms((tray, stack)) == (tray, stack)


def test_goal_q_aims_past_the_threshold_inside_the_range():
    # drawer: open q < -0.14 in [-0.16, 0.01] -> the range end; close q > 0 -> 0.01
    assert LA.goal_q("<", -0.14, -0.16, 0.01, hinge=False) == pytest.approx(-0.16, abs=1e-9)
    assert LA.goal_q(">", 0.0, -0.16, 0.01, hinge=False) == pytest.approx(0.01, abs=1e-9)
    # knob: on q >= 0.5 in [-0.005, 2.1] -> 0.5 + margin; off q < 0 -> past the low end
    assert LA.goal_q(">=", 0.5, -0.005, 2.1, hinge=True) == pytest.approx(
        0.5 + LA.HINGE_MARGIN, abs=1e-9
    )
    assert LA.goal_q("<", 0.0, -0.005, 2.1, hinge=True) == pytest.approx(-0.105, abs=1e-9)


@pytest.fixture(scope="module")
def goal_tasks():
    names = suites.tasks("libero_goal")
    return {i: S.compile_task("libero_goal", names[i], 0) for i in (0, 3, 7)}


def test_stages_from_the_model_drawer_pull_knob_turn_and_implicit_open(goal_tasks):
    drawer = LP.planner_for(goal_tasks[0]).stages  # open the middle drawer
    assert [getattr(s, "mode", None) for s in drawer] == ["pull"]
    assert drawer[0].q_goal == pytest.approx(-0.16, abs=1e-6)
    knob = LP.planner_for(goal_tasks[7]).stages  # turn on the stove
    assert [getattr(s, "mode", None) for s in knob] == ["turn"]
    # "open the top drawer and put the bowl inside" states only In(bowl, top drawer region)
    both = LP.planner_for(goal_tasks[3])
    assert [type(s).__name__ for s in both.stages] == ["Articulation", "LiberoPickPlace"]
    assert both.stages[0].mode == "pull" and both.stages[0].atom[1:3] == ("<", -0.14)
    assert both.starts == (0, len(LA.PULL_PHASES), len(both.phases))
    assert both.phase_names[len(LA.PULL_PHASES) :][:3] == ("clear", "over", "approach")


def test_doors_are_swung_shut_and_opened_by_their_handle_bar():
    name = suites.tasks("libero_10")[9]  # mug in the microwave and close it
    stages = LP.planner_for(S.compile_task("libero_10", name, 0)).stages
    assert [getattr(s, "mode", "place") for s in stages] == ["place", "swing"]
    c = S.compile_task("libero_90", suites.tasks("libero_90")[35], 0)  # open the microwave
    (stage,) = LP.planner_for(c).stages
    assert stage.mode == "open"
    # the grasp point is on the door's vertical handle bar, far from the hinge
    assert np.hypot(*np.subtract(stage.handle[:2], stage.anchor[:2])) > 0.2
    ok, q = _solve(c, 20)
    assert bool(ok.all())
    assert float(q[0, -1, 0]) < -1.3


def _solve(compiled, chunks: int):
    from coda.sim.rollout import Bucket, NativeBackend

    res = NativeBackend(nthread=1).rollout(
        Bucket([compiled]), LP.planner_for(compiled), None, jax.random.PRNGKey(0), chunks
    )
    return np.asarray(res.success_any), np.asarray(res.states.joint_pos)


def test_planner_opens_the_middle_drawer_under_another_handle(goal_tasks):
    ok, q = _solve(goal_tasks[0], 12)
    assert bool(ok.all())
    assert float(q[0, -1, 1]) < -0.14  # the middle drawer, the top one (0) not needed


def test_planner_turns_the_stove_knob_on(goal_tasks):
    ok, q = _solve(goal_tasks[7], 16)
    assert bool(ok.all())
    assert float(q[0, -1, 3]) >= 0.5


def test_placements_sharing_a_region_are_spread_inside_it():
    name = suites.tasks("libero_10")[8]  # both moka pots on the stove (and turn it on)
    stages = LP.planner_for(S.compile_task("libero_10", name, 0)).stages
    assert [getattr(s, "mode", "place") for s in stages] == ["turn", "place", "place"]
    a, b = stages[1].slot, stages[2].slot
    size = stages[1].atom[5]
    assert a == pytest.approx(tuple(-v for v in b), abs=1e-9) and max(map(abs, a)) > 0.02
    assert all(abs(v) < s for v, s in zip(a, size[:2], strict=True))
    # inside a basket's walls the spread leaves room for the whole box
    name = suites.tasks("libero_10")[1]  # cream cheese and butter in the basket
    stages = LP.planner_for(S.compile_task("libero_10", name, 0)).stages
    for st in stages:
        half = max(abs(v) for v in st.box[0][:2] + st.box[1][:2])
        assert max(map(abs, st.slot)) + half < max(st.atom[5][:2])


def test_planner_swings_the_microwave_door_shut():
    name = suites.tasks("libero_90")[33]  # close the microwave
    ok, q = _solve(S.compile_task("libero_90", name, 0), 12)
    assert bool(ok.all())
    assert float(q[0, -1, 0]) > -0.005


def test_find_handle_on_a_ring_with_a_handle_and_none_without():
    from coda.libero import planner_insert as LI

    ang = np.linspace(0, 2 * np.pi, 20, endpoint=False)
    ring = np.stack([0.042 * np.cos(ang), 0.042 * np.sin(ang), np.full(20, 0.06)], 1)
    ring_e = np.tile([0.012, 0.012, 0.044], (20, 1))
    # a C-shaped handle along -y: outer bar, top and bottom bars
    handle = np.array([[0.0, -0.083, 0.056], [0.0, -0.06, 0.026], [0.0, -0.066, 0.08]])
    handle_e = np.array([[0.009, 0.004, 0.029], [0.009, 0.025, 0.009], [0.009, 0.022, 0.006]])
    got = LI.find_handle(np.concatenate([ring, handle]), np.concatenate([ring_e, handle_e]))
    assert got is not None
    g, h, half_w = got
    np.testing.assert_allclose(h, [0.0, -1.0], atol=1e-6)
    # grasp point just inside the handle's outer end (the top bar, 8.8 cm out), low on it;
    # the jaws span its 1.8 cm width
    np.testing.assert_allclose(g, [0.0, -(0.088 - LI.HANDLE_INSET), 0.017 + LI.HANDLE_GRASP_UP],
                               atol=1e-6)  # fmt: skip
    assert half_w == pytest.approx(0.009, abs=1e-6)
    assert LI.find_handle(ring, ring_e) is None  # a plain bowl / cup


def test_microwave_mug_goes_in_by_the_handle_through_the_opening():
    from coda.libero import planner_insert as LI

    c = S.compile_task("libero_10", suites.tasks("libero_10")[9], 0)
    stages = LP.planner_for(c).stages
    assert [type(s).__name__ for s in stages] == ["LiberoInsert", "Articulation"]
    e = stages[0].enc
    # the microwave opens towards -y (its door side); the inside floor is its base plate
    np.testing.assert_allclose(e.opening, [0.0, -1.0], atol=1e-6)
    assert e.floor == pytest.approx(0.024, abs=0.003)
    # the end position keeps the origin inside the In region (half sizes 0.12 x 0.0835) and
    # starts outside the opening
    size = stages[0].atom[5]
    assert abs(e.final[0]) < size[0] and abs(e.final[1]) < size[1]
    assert e.front > 0.1
    # a region without a roof gets the pick-and-place stage
    basket = S.compile_task("libero_10", suites.tasks("libero_10")[1], 0)
    atom = LP.planner_for(basket).stages[0].atom
    assert LI.enclosure(basket, atom) is None


def test_a_bowl_for_an_opened_drawer_is_placed_outward_of_the_drawer_above():
    c = S.compile_task("libero_10", suites.tasks("libero_10")[3], 0)
    place = LP.planner_for(c).stages[0]
    # region frame y is world y here; the drawer opens towards -y: the target moves outward
    # by ~2.5 cm (the middle drawer's handle overhangs the back of the opened bottom drawer)
    assert place.slot[0] == pytest.approx(0.0, abs=1e-6)
    assert -0.035 < place.slot[1] < -0.015
    # a region not in a drawer: no slot
    basket = S.compile_task("libero_10", suites.tasks("libero_10")[1], 0)
    atom = LP.planner_for(basket).stages[0].atom
    assert LG.drawer_slot(basket, atom, LG.object_box(basket, atom[1])) == ()


def test_planner_puts_the_mug_in_the_microwave_and_closes_it():
    ok, q = _solve(S.compile_task("libero_10", suites.tasks("libero_10")[9], 0), 30)
    assert bool(ok.all())
    assert float(q[0, -1, 0]) > -0.005


def test_an_opening_facing_the_workspace_edge_turns_the_handle_sideways():
    # libero_10_swap moves the microwave so its opening faces y = -0.45 (the reach limit): the
    # handle-out approach would need the tcp ~4 cm beyond it, so the handle points sideways
    c = S.compile_task("libero_10_swap", suites.tasks("libero_10_swap")[9], 0)
    e = LP.planner_for(c).stages[0].enc
    np.testing.assert_allclose(e.opening, [0.0, -1.0], atol=1e-6)
    assert abs(float(np.dot(e.handle_to, e.opening))) < 1e-6 and e.slide > 0
    base = LP.planner_for(S.compile_task("libero_10", suites.tasks("libero_10")[9], 0))
    assert base.stages[0].enc.handle_to == base.stages[0].enc.opening
    assert base.stages[0].enc.slide == 0.0
    ok, q = _solve(c, 40)  # the door, opened towards the edge, is pushed nearer its hinge
    assert bool(ok.all())
    assert float(q[0, -1, 0]) > -0.005


def test_a_book_goes_into_a_caddy_side_compartment_turned_and_centred():
    # STUDY_SCENE2, the right compartment (12.4 cm square): the 11 cm book held at a slant
    # caught the wall's top; it is turned to the nearer axis and its box centre (1.2 cm off
    # its origin) put over the region's centre
    c = S.compile_task("libero_90", suites.tasks("libero_90")[80], 0)
    (stage,) = LP.planner_for(c).stages
    assert stage.align
    ok, _ = _solve(c, 14)
    assert bool(ok.all())


def test_a_frying_pan_is_held_by_its_long_handle_and_a_mug_or_bottle_is_not():
    from coda.libero.planner_insert import long_handle

    c = S.compile_task("libero_90", suites.tasks("libero_90")[45], 0)  # stove on + pan on it
    stage = LP.planner_for(c).stages[1]
    (gx, gy, gz), (hx, hy) = stage.handle
    # the pan's handle runs along its local +x, the grasp point on the bar near its root
    assert abs(hx) > 0.99 and 0.12 < gx < 0.2 and abs(gy) < 0.01 and 0.03 < gz < 0.06
    for suite, task, body in (("libero_10", 4, 0), ("libero_90", 32, 2)):  # mug, ketchup
        assert long_handle(S.compile_task(suite, suites.tasks(suite)[task], 0), body) == ()
    # the stove is 15 cm from the reach limit, the handle 18 cm long: the pan is turned
    ok, _ = _solve(c, 30)
    assert bool(ok.all())


def test_a_pan_is_slid_under_a_shelf_by_its_handle():
    from coda.libero.planner_slide import LiberoSlide, slide_in

    name = suites.tasks("libero_90")[42]  # the pan under the shelf (a 6.9 cm-high layer)
    c = S.compile_task("libero_90", name, 0)
    (stage,) = LP.planner_for(c).stages
    assert isinstance(stage, LiberoSlide)
    np.testing.assert_allclose(stage.sl.opening, [0.0, 1.0], atol=1e-6)
    assert stage.sl.front > 0.1  # the pan (20 cm across) starts outside the roof's edge
    # the upper layer has no floor at the pan's height; the microwave mug has no long handle
    up = S.compile_task("libero_90", suites.tasks("libero_90")[40], 0)
    assert slide_in(up, up.success.keywords["atoms"][0]) is None
    mw = S.compile_task("libero_10", suites.tasks("libero_10")[9], 0)
    assert slide_in(mw, mw.success.keywords["atoms"][0]) is None
    ok, _ = _solve(c, 12)
    assert bool(ok.all())


def test_a_tall_bottle_is_pushed_over_inside_a_shallow_drawer():
    # KITCHEN_SCENE5: ketchup (14.5 cm, origin at mid height) into the opened top drawer
    # (6 cm deep): standing, its origin stays above the region; lying, it is inside
    c = S.compile_task("libero_90", suites.tasks("libero_90")[32], 0)
    place = LP.planner_for(c).stages[-1]
    (ux, uy), z_push, t_base, yaw = place.topple
    assert abs(ux) == 1.0 and uy == 0.0 and t_base < -0.03  # along the drawer's length
    assert yaw == 0.0  # above the cabinet's top the palm goes across the push
    assert [p.name for p in place.phases[-4:]] == ["behind", "down", "tip", "up"]
    # a placement that needs none (libero_object: the milk carton into the basket)
    o = S.compile_task("libero_object", suites.tasks("libero_object")[7], 0)
    assert LP.planner_for(o).stages[-1].topple == ()
    ok, _ = _solve(c, 30)
    assert bool(ok.all())


def test_a_bottle_is_laid_down_in_a_drawer_that_closes_over_it():
    # LIBERO-PRO libero_10 task swap: a 15.8 cm wine bottle (origin at its base, so standing
    # it is "in" the 6 cm-deep bottom drawer) must be laid down for the drawer to close
    src = suites.perturbed("libero_10", "task")
    c = S.compile_task(src, suites.tasks(src)[3], 0)
    place, close = LP.planner_for(c).stages
    (ux, uy), z_push, t_base, yaw = place.topple
    assert abs(ux) == 1.0 and uy == 0.0 and t_base < -0.03
    # beside the cabinet's front, the palm goes along the push (across it caught a handle)
    np.testing.assert_allclose(abs(yaw), np.pi / 2, atol=1e-6)
    atom = next(a for a in c.success.keywords["atoms"] if a[0] == "in_region")
    ceiling = LG.drawer_ceiling(c, atom)
    assert z_push - 0.1 < ceiling < z_push  # standing it reaches above the closed drawer
    assert LG.topple(c, atom, LG.object_box(c, atom[1])) == ()  # no close: it stays standing
    ok, _ = _solve(c, 40)
    assert bool(ok.all())


def test_a_plate_is_taken_across_its_rim_ring_onto_a_raised_target():
    from coda.sim.rollout import Bucket, NativeBackend

    # LIBERO-PRO libero_goal task swap "put the plate on the stove": a 14 cm plate (wider than
    # the jaws) whose rim is a ring of inclined 5 mm slabs round a 0.6 cm base
    src = suites.perturbed("libero_goal", "task")
    c = S.compile_task(src, suites.tasks(src)[1], 0)
    (place,) = LP.planner_for(c).stages
    r_mid, open_half, z = place.flat
    assert 0.04 < r_mid < 0.065 and open_half < robot.FINGER_OPEN and 0.0 < z < 0.015
    assert r_mid - open_half > robot.FINGER_HALF[1]  # the inner pad over the plate's middle
    # a bowl (a rim, but 5 cm high) is not flat
    g = S.compile_task("libero_goal", suites.tasks("libero_goal")[1], 0)
    atom = g.success.keywords["atoms"][0]
    assert LG.flat_grasp(g, atom[1], LG.object_box(g, atom[1])) == ()
    res = NativeBackend(nthread=1).rollout(
        Bucket([c]), LP.planner_for(c), None, jax.random.PRNGKey(0), 30
    )
    assert bool(np.asarray(res.success_any).all())
    # in state 0 a bowl touches the plate's far (-x) side: the jaws went to the near (+x) side
    adr = c.model.jnt_qposadr[c.model.body_jntadr[c.model.body("plate_1").id]]
    plate_x = float(np.asarray(res.qpos)[0, 0, adr])
    phase = np.asarray(res.info["phase"])[0, :, -1]  # [C]
    first_grasp = int(np.argmax(phase == 2))
    gripper_x = float(np.asarray(res.qpos)[0, first_grasp + 1, 0])
    np.testing.assert_allclose(gripper_x - plate_x, r_mid, atol=0.01)


def test_an_object_for_the_tilted_rack_is_aimed_up_its_board():
    # LIBERO-PRO libero_goal task swap "put the cream cheese on the rack": the rack's region
    # runs up a 27.5 deg board from a 4 mm lip; aimed at the region's centre (the lip) the
    # cheese slid over it and fell (10/50)
    src = suites.perturbed("libero_goal", "task")
    c = S.compile_task(src, suites.tasks(src)[9], 0)
    (place,) = LP.planner_for(c).stages
    assert place.atom[0] == "on_region" and place.box
    ok, _ = _solve(c, 30)
    assert bool(ok.all())


def test_a_book_is_laid_down_and_pushed_under_a_shelf():
    from coda.libero.planner_slide import LiberoTopplePush

    # STUDY_SCENE4: a 12.4 cm book standing, the shelf's lower layer 6.9 cm high
    c = S.compile_task("libero_90", suites.tasks("libero_90")[89], 0)
    (stage,) = LP.planner_for(c).stages
    assert isinstance(stage, LiberoTopplePush)
    tp = stage.tp
    np.testing.assert_allclose(tp.opening, [0.0, -1.0], atol=1e-6)  # the shelf faces -y
    assert tp.up == 2 and tp.thick < 0.03 < 0.069 < tp.height  # lying it fits, standing not
    ok, _ = _solve(c, 20)
    assert bool(ok.all())


def test_object_box_takes_the_geoms_of_welded_child_bodies():
    # LIBERO's new_salad_dressing keeps its geoms in a child body (no joint between)
    c = S.compile_task("libero_90", suites.tasks("libero_90")[62], 0)
    body = c.layout.body_names.index("new_salad_dressing_1")
    lo, hi = (np.asarray(v) for v in LG.object_box(c, body))
    assert 0.13 < float(np.max(hi - lo)) < 0.16  # the bottle, not a point


def test_a_grasp_beyond_the_reach_moves_along_the_object_into_it():
    # LIBERO-PRO libero_goal swap: the 8 cm cream cheese's centre sits 1.2 cm beyond our
    # gripper's x reach; its near half is within it
    rot = jnp.eye(3)[None]  # [1, 3, 3]: the object's long axis along world x
    box = ((-0.04, -0.02, 0.0), (0.04, 0.02, 0.018))
    out = np.asarray(LP._into_reach(jnp.asarray([[0.088, 0.2]]), rot, box))
    lo = robot.TARGET_LOW[0] + LP.GRASP_REACH_MARGIN
    np.testing.assert_allclose(out[0], [lo, 0.2], atol=1e-6)
    inside = np.asarray(LP._into_reach(jnp.asarray([[0.3, 0.2]]), rot, box))
    np.testing.assert_allclose(inside[0], [0.3, 0.2], atol=1e-7)  # in reach: unchanged
    short = ((-0.01, -0.01, 0.0), (0.01, 0.01, 0.02))  # no room to move along it
    np.testing.assert_allclose(
        np.asarray(LP._into_reach(jnp.asarray([[0.088, 0.2]]), rot, short))[0],
        [0.088, 0.2],
        atol=1e-7,
    )
    src = suites.perturbed("libero_goal", "swap")
    c = S.compile_task(src, suites.tasks(src)[6], 2)  # state 2: the cream cheese out of reach
    ok, _ = _solve(c, 20)
    assert bool(ok.all())
