"""Pipeline stages, one module each: validate -> compile -> gang_pool (the evaluation, on gangs).

Each stage takes a sample and returns either the sample (for the next stage) or a final
:class:`~pkb_ray.schema.Result`. No stage raises for a bad sample.
"""
