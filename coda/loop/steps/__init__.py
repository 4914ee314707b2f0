"""The steps of a round, each a function of the frozen services (`coda.loop.services`), the run
state and its explicit inputs, returning a frozen result (and its metrics-row entries):

  generate (2) -> roll_out (3) -> critique, validate (4) -> compile_potentials, route_modes (5)
  -> score_modes (7) -> awr_update / bc_update (6) -> evaluate; planner demos in `demos`.

Step 1 (allocation) and the choice of which steps run are the strategy's
(`coda.loop.allocators`, `coda.loop.strategies`); `coda.loop.round` composes them.
"""
