"""LIBERO's observation cameras as robosuite names and poses them (constants shared by the
floating gripper's scenes and the Panda's, `coda.libero.scene` / `coda.libero.panda`)."""

from __future__ import annotations

import math

from coda.sim import robot

# Cameras as LIBERO renders its observations (robosuite names). The agent view is a fixed world
# camera whose pose each LIBERO problem class sets in `_setup_camera` (LIBERO's world frame, w x y
# z; no fovy given, so MuJoCo's default 45 deg); we move it into our frame like every position.
AGENTVIEW_CAMERA = "agentview"
WRIST_CAMERA = "robot0_eye_in_hand"
AGENTVIEW_FOVY = 45.0  # deg
_TABLE_VIEW = (
    (0.6586131746834771, 0.0, 1.6103500240372423),
    (0.638018, 0.304850, 0.304850, 0.638018),
)
_LOW_VIEW = (0.618217, 0.343231, 0.343231, 0.618218)  # living room / floor: a steeper look
AGENTVIEW_POSE = {  # problem class -> (pos [3], quat [4]) in LIBERO's world
    "libero_tabletop_manipulation": _TABLE_VIEW,
    "libero_kitchen_tabletop_manipulation": _TABLE_VIEW,
    "libero_study_tabletop_manipulation": (
        (0.4586131746834771, 0.0, 1.6103500240372423),
        _TABLE_VIEW[1],
    ),
    "libero_living_room_tabletop_manipulation": ((0.6065773716836134, 0.0, 0.96), _LOW_VIEW),
    "libero_floor_manipulation": ((0.8965773716836134, 0.0, 0.65), _LOW_VIEW),
}
# The wrist camera: robosuite's Panda `eye_in_hand` (fovy 75) sits 5 cm along the hand's x axis
# at the hand's origin, looking along the approach axis at the fingers. LIBERO's Panda starts with
# its hand x along world +x (away from the base) and its fingers along world -y, so on our gripper
# (approach -z, fingers along y) it sits 5 cm towards +x, as high above our tcp as the Franka
# hand's flange is above its grasp point (0.1034 m); image up = +x, fingers at the bottom edge.
WRIST_FOVY = 75.0  # deg
FRANKA_FLANGE_TO_TCP = 0.1034  # m
WRIST_POS = (0.05, 0.0, FRANKA_FLANGE_TO_TCP - robot.TCP_OFFSET)  # in the gripper body frame
WRIST_QUAT = (math.sqrt(0.5), 0.0, 0.0, -math.sqrt(0.5))  # camera x = -y, y = +x, looks along -z
