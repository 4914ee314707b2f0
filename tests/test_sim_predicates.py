"""Success predicates ν on hand-built `SimState`s: positive and negative cases of every predicate
(held above the goal, beside it, tipped over, hovering without contact, inside but moving), the
LIBERO reference predicates, and the velocity sensors that "at rest" reads.

One canonical world holds a positive instance of every relation; each case edits one body, so a
failure names the single property that ν must (or must not) depend on. Pure jnp, no physics.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from coda.sim import geometry as G
from coda.sim import predicates as P
from coda.sim.state import FLOOR, LEFT, N_FIXED_ENTITIES, RIGHT, SimState, SymbolTable, decode

# body index per role; entity = index + 3
ROLES = {
    "target": 0,  # cube (half 0.02) on the plate
    "goal": 1,  # plate, top at z = 0.012
    "item": 2,  # cube inside the bin
    "container": 3,  # bin, interior floor at z = 0.005, rim at 0.08
    "top": 4,  # cube (half 0.02) stacked on the base
    "base": 5,  # cube (half 0.025), top at z = 0.05
    "peg": 6,  # peg (0.015, 0.015, 0.04), bottom at 0.04
    "hole": 7,  # hole block, rim at z = 0.06, opening half 0.021
}
SYM = SymbolTable(tuple(sorted(ROLES.items())), (("cabinet", 0),))
NB = len(ROLES)
BODIES = {  # role: (pos, half, inner)
    "target": ((0.5, 0.0, 0.032), (0.02, 0.02, 0.02), None),
    "goal": ((0.5, 0.0, 0.006), (0.08, 0.08, 0.006), (0.08, 0.08, 0.05, 0.006)),
    "item": ((0.3, 0.2, 0.025), (0.02, 0.02, 0.02), None),
    "container": ((0.3, 0.2, 0.04), (0.07, 0.07, 0.04), (0.06, 0.06, 0.03, -0.035)),
    "top": ((0.3, -0.2, 0.07), (0.02, 0.02, 0.02), None),
    "base": ((0.3, -0.2, 0.025), (0.025, 0.025, 0.025), None),
    "peg": ((0.6, 0.3, 0.08), (0.015, 0.015, 0.04), None),
    "hole": ((0.6, 0.3, 0.03), (0.05, 0.05, 0.03), (0.021, 0.021, 0.01, 0.01)),
}
RESTING = [  # support contacts of the canonical world
    ("target", "goal"),
    ("item", "container"),
    ("top", "base"),
    ("peg", "hole"),
    ("goal", FLOOR),
    ("container", FLOOR),
    ("base", FLOOR),
    ("hole", FLOOR),
]


def _ent(x: str | int) -> int:
    return x if isinstance(x, int) else N_FIXED_ENTITIES + ROLES[x]


def _quat(axis: tuple[float, float, float], angle: float) -> tuple[float, ...]:
    a = np.asarray(axis, np.float64) / np.linalg.norm(axis)
    return (np.cos(angle / 2), *(np.sin(angle / 2) * a))


class World:
    """Mutable canonical world -> SimState (numpy while editing, jnp when built)."""

    def __init__(self) -> None:
        self.pos = np.array([BODIES[r][0] for r in ROLES], np.float32)  # [NB, 3]
        self.half = np.array([BODIES[r][1] for r in ROLES], np.float32)  # [NB, 3]
        self.inner = np.array(  # [NB, 4]
            [BODIES[r][2] or (0.0,) * 4 for r in ROLES], np.float32
        )
        self.quat = np.tile(np.array([1.0, 0, 0, 0], np.float32), (NB, 1))  # [NB, 4]
        self.linvel = np.zeros((NB, 3), np.float32)
        self.angvel = np.zeros((NB, 3), np.float32)
        ne = N_FIXED_ENTITIES + NB
        self.contact = np.zeros((ne, ne), np.float32)
        for a, b in RESTING:
            self.touch(a, b)
        self.joint_pos = np.array([0.25], np.float32)  # fraction 0.83 of [0, 0.3]

    def touch(self, a, b, on: bool = True) -> World:
        self.contact[_ent(a), _ent(b)] = self.contact[_ent(b), _ent(a)] = float(on)
        return self

    def grasp(self, role: str) -> World:
        return self.touch(LEFT, role).touch(RIGHT, role)

    def move(self, role: str, dx=0.0, dy=0.0, dz=0.0) -> World:
        self.pos[ROLES[role]] += np.array([dx, dy, dz], np.float32)
        return self

    def state(self, velocities: bool = True) -> SimState:
        return SimState(
            ee_pos=jnp.array([0.5, 0.0, 0.3]),
            ee_quat=jnp.array([1.0, 0, 0, 0]),
            finger=jnp.array([0.04, 0.04]),
            body_pos=jnp.asarray(self.pos),
            body_quat=jnp.asarray(self.quat),
            joint_pos=jnp.asarray(self.joint_pos),
            contact=jnp.asarray(self.contact),
            body_half=jnp.asarray(self.half),
            inner=jnp.asarray(self.inner),
            joint_range=jnp.array([[0.0, 0.3]]),
            body_linvel=jnp.asarray(self.linvel) if velocities else None,
            body_angvel=jnp.asarray(self.angvel) if velocities else None,
        )


def _nu(pred, world: World, **kw) -> bool:
    return bool(pred(world.state(), SYM, **kw))


def test_canonical_world_satisfies_every_relation():
    w = World()
    assert _nu(P.placed_on, w)
    assert _nu(P.placed_inside, w, obj="item")
    assert _nu(P.stacked, w)
    assert _nu(P.inserted, w)
    assert _nu(P.articulated_at, w, action="open") and not _nu(P.articulated_at, w, action="close")


def test_predicates_batch_and_jit():
    """ν maps a state batch [...] to bools [...] under jit (placed_on: resting, hovering)."""
    hover = World().move("target", dz=0.015).touch("target", "goal", False)
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), World().state(), hover.state())
    out = jax.jit(lambda s: P.placed_on(s, SYM))(batch)
    assert out.shape == (2,) and out.dtype == jnp.bool_
    np.testing.assert_array_equal(np.asarray(out), [True, False])


# ----------------------------------------------------------------------------- On


def test_placed_on_negatives():
    # held above the goal: grasped, 5 cm up, no support contact
    held = World().move("target", dz=0.05).touch("target", "goal", False).grasp("target")
    assert not _nu(P.placed_on, held)
    # held while resting on it: the support contact is there, but the fingers still hold it
    assert not _nu(P.placed_on, World().grasp("target"))
    # a single finger pad still touching it: not let go
    assert not _nu(P.placed_on, World().touch(LEFT, "target"))
    # beside the plate, on the table
    beside = World().move("target", dx=0.12, dz=-0.012).touch("target", "goal", False)
    assert not _nu(P.placed_on, beside.touch("target", FLOOR))
    # beside it but touching its rim: the centre is off the footprint
    rim = World().move("target", dx=0.1, dz=-0.012).touch("target", FLOOR)
    assert not _nu(P.placed_on, rim)
    # under-the-support geometry: touching, over the footprint, but the centre below the top
    assert not _nu(P.placed_on, World().move("target", dz=-0.03))


def test_hovering_is_not_placed_though_within_the_old_height_tolerance():
    """1.5 cm above the plate without contact: the height test alone (old ν) accepted it."""
    w = World().move("target", dz=0.015).touch("target", "goal", False)
    s = w.state()
    assert bool(G.on_top(s, ROLES["target"], ROLES["goal"], tol=0.02))  # height alone: "on"
    assert not _nu(P.placed_on, w)
    assert not bool(P.libero_on(s, SYM))


def test_placed_on_accepts_any_orientation_and_off_centre_on_the_footprint():
    w = World()
    w.quat[ROLES["target"]] = _quat((1, 0, 0), np.pi / 2)  # tipped on its side: still on it
    assert _nu(P.placed_on, w)
    assert _nu(P.placed_on, World().move("target", dx=0.05, dy=0.05))  # near the plate's edge


# ----------------------------------------------------------------------------- In


def test_placed_inside_needs_release_and_rest():
    item = ROLES["item"]
    assert not _nu(P.placed_inside, World().grasp("item"), obj="item")  # held inside
    falling = World().move("item", dz=0.03).touch("item", "container", False)
    falling.linvel[item] = (0.0, 0.0, -0.3)  # inside but moving: falling through
    assert not _nu(P.placed_inside, falling, obj="item")
    assert bool(G.inside(falling.state(), item, ROLES["container"]))  # geometry alone says in
    sliding = World()
    sliding.linvel[item] = (P.REST_MAX_SPEED * 1.5, 0.0, 0.0)
    assert not _nu(P.placed_inside, sliding, obj="item")
    rolling = World()
    rolling.angvel[item] = (P.REST_MAX_TUMBLE * 2, 0.0, 0.0)  # tumbling in place
    assert not _nu(P.placed_inside, rolling, obj="item")


def test_placed_inside_ignores_spin_about_the_vertical():
    """A released ball spinning in place (frictionless torsion in MuJoCo) is at rest."""
    w = World()
    w.angvel[ROLES["item"]] = (0.0, 0.0, 18.0)
    w.linvel[ROLES["item"]] = (1e-5, 0.0, 0.0)
    assert _nu(P.placed_inside, w, obj="item")


def test_placed_inside_geometry_negatives():
    beside = World().move("item", dx=0.15, dz=0.0).touch("item", "container", False)
    assert not _nu(P.placed_inside, beside, obj="item")
    above = World().move("item", dz=0.09).touch("item", "container", False)  # bottom over rim
    assert not _nu(P.placed_inside, above, obj="item")
    tipped = World()
    tipped.quat[ROLES["item"]] = _quat((0, 1, 0), np.pi / 2)  # lying on its side, in the bin
    assert _nu(P.placed_inside, tipped, obj="item")


def test_at_rest_without_velocities_is_a_clear_error():
    with pytest.raises(ValueError, match="body_linvel"):
        P.placed_inside(World().state(velocities=False), SYM, obj="item")


# ----------------------------------------------------------------------------- stacked

FACES = {  # rotation that puts the named body face down
    "-z": ((1, 0, 0), 0.0),
    "+z": ((1, 0, 0), np.pi),
    "+y": ((1, 0, 0), np.pi / 2),
    "-y": ((1, 0, 0), -np.pi / 2),
    "+x": ((0, 1, 0), np.pi / 2),
    "-x": ((0, 1, 0), -np.pi / 2),
}


@pytest.mark.parametrize("face", sorted(FACES))
def test_stacked_accepts_a_cube_on_each_face(face):
    axis, angle = FACES[face]
    w = World()
    yaw = _quat((0, 0, 1), 0.4)  # and any heading
    q = np.zeros(4)
    mujoco.mju_mulQuat(q, np.asarray(yaw), np.asarray(_quat(axis, angle)))
    w.quat[ROLES["top"]] = q
    assert _nu(P.stacked, w)


def test_stacked_rejects_a_tipped_block_and_the_usual_negatives():
    top = ROLES["top"]
    block = World()
    block.half[top] = (0.015, 0.025, 0.05)  # a non-symmetric block
    block.pos[top, 2] = 0.05 + 0.05  # standing on its end
    assert _nu(P.stacked, block)
    block.quat[top] = _quat((1, 0, 0), np.pi / 2)  # lying on its long side
    block.pos[top, 2] = 0.05 + 0.025
    assert _nu(P.stacked, block)
    block.quat[top] = _quat((1, 0, 0), np.pi / 4)  # tipped: leaning on an edge
    block.pos[top, 2] = 0.05 + 0.053
    assert not _nu(P.stacked, block)
    assert not bool(G.face_down(block.state(), top, P.STACK_TILT_TOL))
    hover = World().move("top", dz=0.015).touch("top", "base", False)
    assert not _nu(P.stacked, hover)
    held = World().move("top", dz=0.04).touch("top", "base", False).grasp("top")
    assert not _nu(P.stacked, held)
    assert not _nu(P.stacked, World().grasp("top"))  # resting on it, not yet let go
    beside = World().move("top", dy=0.045, dz=-0.05).touch("top", "base", False)
    assert not _nu(P.stacked, beside.touch("top", FLOOR))


# ----------------------------------------------------------------------------- inserted


def test_inserted_negatives_and_depth():
    assert not _nu(P.inserted, World().grasp("peg"))  # held in the hole
    beside = World().move("peg", dx=0.08, dz=-0.04).touch("peg", "hole", False)
    assert not _nu(P.inserted, beside.touch("peg", FLOOR))
    hover = World().move("peg", dz=0.03).touch("peg", "hole", False)  # above the rim
    assert not _nu(P.inserted, hover)
    tipped = World()
    tipped.quat[ROLES["peg"]] = _quat((1, 0, 0), np.pi / 2)  # lying across the hole
    tipped.pos[ROLES["peg"], 2] = 0.06 + 0.015
    assert not _nu(P.inserted, tipped)
    shallow = World().move("peg", dz=0.01)  # bottom 1 cm below the rim (0.05)
    assert not _nu(P.inserted, shallow)  # default depth 1.5 cm
    assert _nu(P.inserted, shallow, depth=0.005)


# ----------------------------------------------------------------------------- articulated


@pytest.mark.parametrize(
    "fraction, is_open, is_closed",
    [(0.0, False, True), (0.07, False, True), (0.1, False, False), (0.45, False, False)]
    + [(0.55, True, False), (1.0, True, False)],
)
def test_articulated_at_fractions(fraction, is_open, is_closed):
    w = World()
    w.joint_pos[0] = fraction * 0.3
    assert _nu(P.articulated_at, w, action="open") == is_open
    assert _nu(P.articulated_at, w, action="close") == is_closed


def test_articulated_at_is_independent_of_the_grip_and_rejects_bad_actions():
    """Open / Close count the joint (as LIBERO's do), held handle or not."""
    assert _nu(P.articulated_at, World().grasp("target"), action="open")
    with pytest.raises(ValueError, match="'open' or 'close'"):
        P.articulated_at(World().state(), SYM, action="ajar")


# ----------------------------------------------------------------------------- LIBERO


def test_libero_on_differs_from_ours_where_documented():
    off = World().move("target", dx=0.05)  # 5 cm off-centre, still on the plate
    assert _nu(P.placed_on, off) and not _nu(P.libero_on, off)
    near = World().move("target", dx=0.02)
    assert _nu(P.libero_on, near)
    held = World().grasp("target")  # LIBERO has no release check
    assert _nu(P.libero_on, held) and not _nu(P.placed_on, held)
    assert not _nu(P.libero_on, World().touch("target", "goal", False))  # no contact


@pytest.mark.parametrize(
    "kind, action, q_true, q_false",
    [
        ("cabinet_drawer", "open", -0.15, -0.13),
        ("cabinet_drawer", "close", 0.01, 0.0),
        ("microwave", "open", -1.31, -1.29),
        ("microwave", "close", -0.004, -0.006),
        ("stove_knob", "turn_on", 0.5, 0.49),
        ("stove_knob", "turn_off", -0.01, 0.0),
    ],
)
def test_libero_joint_thresholds(kind, action, q_true, q_false):
    w = World()
    w.joint_pos[0] = q_true
    assert _nu(P.libero_joint_at, w, obj="cabinet", kind=kind, action=action)
    w.joint_pos[0] = q_false
    assert not _nu(P.libero_joint_at, w, obj="cabinet", kind=kind, action=action)


def test_libero_joint_at_names_bad_input():
    with pytest.raises(ValueError, match="unknown object kind 'oven'"):
        P.libero_joint_at(World().state(), SYM, "cabinet", "oven", "open")
    with pytest.raises(ValueError, match="no action 'turn_on'"):
        P.libero_joint_at(World().state(), SYM, "cabinet", "microwave", "turn_on")


# ----------------------------------------------------------------------------- sensors


def test_decoded_velocities_match_mujoco(cube_plate_bucket):
    """Velocity sensors decode to the free body's world-frame velocities (what at_rest reads)."""
    c = cube_plate_bucket.variants[0]
    m, d = c.model, mujoco.MjData(c.model)
    d.qpos[:] = c.init_qpos
    jid = m.joint("target/free").id
    adr = m.jnt_dofadr[jid]
    d.qvel[adr : adr + 6] = [0.1, -0.2, 0.3, 0.5, -1.0, 2.0]  # linear world, angular local
    mujoco.mj_forward(m, d)
    consts = {k: jnp.asarray(v) for k, v in c.consts.items()}
    s = decode(jnp.asarray(d.sensordata, jnp.float32), c.layout, consts, jnp.zeros(6))
    i = c.sym.body("target")
    rot = d.xmat[m.body("target").id].reshape(3, 3)
    np.testing.assert_allclose(np.asarray(s.body_linvel[i]), [0.1, -0.2, 0.3], atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(s.body_angvel[i]), rot @ np.array([0.5, -1.0, 2.0]), atol=1e-5
    )
    np.testing.assert_allclose(np.asarray(s.body_linvel[c.sym.body("goal")]), 0.0, atol=1e-7)
    with pytest.raises(ValueError, match="StateLayout decodes"):
        decode(jnp.asarray(d.sensordata[:-1]), c.layout, consts, jnp.zeros(6))
