"""The failure critic C (§3.2): ψ = (δ factor, p phase, c cause, e evidence) for failed episodes.

Two backends behind one interface, chosen by config name (`make_critic`): "offline" (the embedded
default: phase where progress stopped, factor by counterfactual probes, cause by measured-evidence
rules; `coda.critic.offline`) and "vlm" (keyframes + state summary through `coda.llm`;
`coda.critic.vlm`). Both validate against one schema (`coda.critic.types`) and record every
accepted diagnosis in memory, which clusters it into modes K_j.
"""

from coda.critic.base import (
    CRITICS,
    Critic,
    Critique,
    default_stratum,
    make_critic,
    record,
    register_critic,
    select_failures,
)
from coda.critic.episode import (
    Episode,
    TraceRoles,
    episodes_from_rollout,
    keyframe_indices,
    make_episode,
    render_keyframes,
    segment_bucket,
    segment_states,
    trace_features,
    trace_roles,
)
from coda.critic.evidence import Finding, infer_cause
from coda.critic.jaws import grip_capacity, object_width
from coda.critic.keyframes import keyframe_sheet, readable_keyframes, trace_sheet
from coda.critic.offline import OfflineCritic
from coda.critic.probes import ProbeStats, attribute, isolate_task_probe, run_probes
from coda.critic.types import (
    CAUSE_FACTOR_HINT,
    CAUSES,
    DIAGNOSIS_SCHEMA,
    FACTOR_FROM_MEMORY,
    FACTORS,
    MEMORY_FACTOR,
    Diagnosis,
    DiagnosisError,
    Evidence,
    PhaseError,
    validate_diagnosis,
)
from coda.critic.vlm import VLMCritic, state_summary

__all__ = [
    "CAUSES",
    "CAUSE_FACTOR_HINT",
    "CRITICS",
    "DIAGNOSIS_SCHEMA",
    "FACTORS",
    "FACTOR_FROM_MEMORY",
    "MEMORY_FACTOR",
    "Critic",
    "Critique",
    "Diagnosis",
    "DiagnosisError",
    "Episode",
    "Evidence",
    "Finding",
    "OfflineCritic",
    "PhaseError",
    "ProbeStats",
    "TraceRoles",
    "VLMCritic",
    "attribute",
    "default_stratum",
    "episodes_from_rollout",
    "grip_capacity",
    "infer_cause",
    "isolate_task_probe",
    "keyframe_indices",
    "keyframe_sheet",
    "make_critic",
    "make_episode",
    "object_width",
    "record",
    "register_critic",
    "render_keyframes",
    "readable_keyframes",
    "run_probes",
    "segment_bucket",
    "segment_states",
    "select_failures",
    "state_summary",
    "trace_sheet",
    "trace_features",
    "trace_roles",
    "validate_diagnosis",
]
