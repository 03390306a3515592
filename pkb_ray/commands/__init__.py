"""The ``pkb-ray`` subcommands besides the Hydra jobs (:mod:`pkb_ray.sweep`,
:mod:`pkb_ray.baselines`): what every entry point does around its job (:mod:`.entry`), ``pkb-ray ls``
(:mod:`.listing`) and ``pkb-ray submit`` (:mod:`.submit`).

May import: spec, isolation, results, generate, pipeline, problem.
"""
