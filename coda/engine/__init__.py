"""Data engine G (§3.1, §3.3): control validation of candidate modes and budget allocation.

Host-side, pure functions of memory's numbers: ``validate`` (one-sided targeted-vs-control test,
status written back to memory, refutation rate per critic backend) and ``allocate`` (UCB over
validated modes, ε novel seeds, replay, success band actions on Ω).
"""
