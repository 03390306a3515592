"""A run on Ray: the stages wired into a Ray Data stream (:mod:`.wiring`: validate, compile,
evaluate on the gang pool), the gangs (:mod:`.gang`, :mod:`.gang_pool`) and the pool's decisions
(:mod:`.scheduler`), the cluster's room (:mod:`.cluster`), what a run covers (:mod:`.selection`),
refinement rounds (:mod:`.refine`) and live numbers (:mod:`.telemetry`).

May import: spec, measure, runner, isolation, problems, evaluate, results, generate, problem, cuda.
"""
