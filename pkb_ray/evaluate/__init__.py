"""One sample judged on one gang: the harness that runs its steps (:mod:`.harness`), the timed
rounds that alternate the clean set and the candidate's (:mod:`.rounds`), where each side's timed
inputs are staged (:mod:`.staging`), the checks of picked timed calls (:mod:`.round_checks`), the
sample's deadline (:mod:`.deadlines`), and the rules that turn what the trusted side saw into a
status (:mod:`.verdict`, :mod:`.interference`).

May import: spec, measure, runner, isolation, problems, problem, cuda.
"""
