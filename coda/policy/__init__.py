"""CoDA policies: pi0.5 (openpi-exact Flax) and an OpenVLA-OFT-style backbone.

The policy protocol is documented in ``coda.policy.base``.
"""

from coda.policy.base import Batch, Observation, Policy, make_observation, pad_state
from coda.policy.configs import CONFIGS, get_config
from coda.policy.pi05 import Pi05Policy

__all__ = [
    "CONFIGS",
    "Batch",
    "Observation",
    "Pi05Policy",
    "Policy",
    "get_config",
    "make_observation",
    "pad_state",
]
