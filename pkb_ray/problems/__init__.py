"""Problems as the evaluator uses them, beyond what a problem's author writes against
(:mod:`pkb_ray.problem`, :mod:`pkb_ray.problem_helpers`): the checks a problem file must pass before
a run (:mod:`.check`), the reference's expected outputs computed in the clean rank set and kept
(:mod:`.references`), and which backends a problem admits (:mod:`.backend_rules`).

May import: spec, measure, runner, isolation, problem.
"""
