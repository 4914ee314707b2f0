"""Simulation: factored scenes (τ, σ, α), object pool, gripper, task families with ν,
MuJoCo/MJX compile and buckets, verification, scripted planners, chunked rollouts, rendering.

Module map: assets (object pool) · robot (gripper, action convention) · scene / sdk (scene
programs, Exec) · tasks (families) · predicates (ν) · geometry (helpers shared with potentials) ·
state (sensor layout → SimState) · compile (MjSpec → MjModel, structure keys) · verify ·
planner · rollout (native / mjx backends) · render.
"""
