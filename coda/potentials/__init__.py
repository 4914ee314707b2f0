"""Text2potential (§3.4): training programs → staged, jittable potentials Φ(s), with checks,
repair and the compiler R_hone.

Language and semantics: ``coda.potentials.program``; checks: ``coda.potentials.checks``;
offline program templates: ``coda.potentials.library``; compilers R_hone and the repair loop:
``coda.potentials.compiler`` (importing the package installs the offline ``"compiler"`` role).
"""

from coda.potentials.checks import (
    CHECK_STAGES,
    CheckFailure,
    CheckReport,
    Demos,
    check_program,
    rank_correlation_with_time,
    spearman,
)
from coda.potentials.compiler import (
    COMPILER_SCHEMA,
    Attempt,
    Compiler,
    CompileRequest,
    FailureRecord,
    LLMCompiler,
    OfflineCompiler,
    Proposal,
    compile_with_repair,
    offline_compiler_handler,
    retrieve_examples,
)
from coda.potentials.library import subgoal_program, task_description_program, task_kind
from coda.potentials.program import (
    JNP_NAMES,
    LEARNING_TOOLS,
    Potential,
    ProgramError,
    Subgoal,
    compile_program,
    endpoint_potential,
    program_namespace,
)

__all__ = [
    "COMPILER_SCHEMA",
    "Attempt",
    "CompileRequest",
    "Compiler",
    "FailureRecord",
    "LLMCompiler",
    "OfflineCompiler",
    "Proposal",
    "compile_with_repair",
    "offline_compiler_handler",
    "retrieve_examples",
    "CHECK_STAGES",
    "JNP_NAMES",
    "LEARNING_TOOLS",
    "CheckFailure",
    "CheckReport",
    "Demos",
    "Potential",
    "ProgramError",
    "Subgoal",
    "check_program",
    "compile_program",
    "endpoint_potential",
    "program_namespace",
    "rank_correlation_with_time",
    "spearman",
    "subgoal_program",
    "task_description_program",
    "task_kind",
]
