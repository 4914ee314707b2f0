"""Policy training for §3.5: the chunk value critic, shaping at chunk endpoints, AWR / BC,
best-of-j selection and routing by success band.

Parts:
* `agent`: `PolicyAgent`, a rollout `ChunkPolicy` around a `coda.policy` policy (state-only),
  with best-of-j chunk selection by the critic;
* `shaping`: sparse chunk rewards from ν, r̃ = r + β(ΓΦ(s') − Φ(s)) at chunk endpoints, n-step
  chunk backups;
* `critic`: Q(o, τ, a_{t:t+H}) ensemble + V(o), Polyak target, jitted train step;
* `awr`: exp(A/λ) weights (normalised, clipped), BC batches from planner demos;
* `routing`: learning tool per subgoal by success rate; refinement of potentials;
* `learner`: the loop pieces (collect, add rollouts, critic / AWR / BC updates, frozen-policy
  ablation) and `critic_convergence` (with vs. without Φ).
"""

from coda.train.agent import AgentParams, ObsNorm, PolicyAgent, make_obs, state_features
from coda.train.awr import awr_batch, awr_weights, bc_batch, demo_batch
from coda.train.critic import (
    ChunkCritic,
    CriticState,
    Transitions,
    init_critic_state,
    make_critic_train_step,
)
from coda.train.learner import MODES, SOURCES, Learner, LearnerConfig, critic_convergence
from coda.train.routing import RefinementReport, Routing, RoutingConfig, refinement_report, route
from coda.train.shaping import (
    ChunkRewards,
    chunk_rewards,
    chunk_transitions,
    endpoint_potential,
    n_step_targets,
    shaped_rewards,
    sparse_rewards,
)

__all__ = [
    "MODES",
    "SOURCES",
    "AgentParams",
    "ChunkCritic",
    "ChunkRewards",
    "CriticState",
    "Learner",
    "LearnerConfig",
    "ObsNorm",
    "PolicyAgent",
    "RefinementReport",
    "Routing",
    "RoutingConfig",
    "Transitions",
    "awr_batch",
    "awr_weights",
    "bc_batch",
    "chunk_rewards",
    "chunk_transitions",
    "critic_convergence",
    "demo_batch",
    "endpoint_potential",
    "init_critic_state",
    "make_critic_train_step",
    "make_obs",
    "n_step_targets",
    "refinement_report",
    "route",
    "shaped_rewards",
    "sparse_rewards",
    "state_features",
]
