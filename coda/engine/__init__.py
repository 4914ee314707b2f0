"""Data engine G (§3.1, §3.3): which scenes the policy sees next, and why.

* ``seeding``: fresh verified tasks from the family pools (ε novel seeds).
* ``roles`` / ``programs`` / ``edits``: generation programs Ω — JSON-able, parameterised edits of
  one factor over symbolic roles (target, goal, container, distractor_k), re-bindable into any
  scene (and family) that provides the roles; applied through the SDK's setters, locked to the
  program's factor.
* ``rules`` / ``engines`` / ``llm_engine``: who writes a mode's program — the offline rule table
  (δ, p, cause) -> edits, or an LLM coding agent with sandboxed, verified, repaired programs;
  ``make_engine("offline" | "llm")``.
* ``generate``: targeted generation (B verified variants, ε novel), paired targeted / control
  validation batches, rollouts of the current policy on them, and ``validate_mode`` (test,
  decision in memory, Ω only when validated).
* ``validate``: the one-sided targeted-vs-control test; ``allocate``: UCB over validated modes,
  ε novel seeds, replay, success band actions on Ω — pure functions of memory's numbers.
"""
