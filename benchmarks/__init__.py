"""pkb_ray's benchmarks: each module is one, registered by name in :mod:`benchmarks.registry` and
run with ``python -m benchmarks NAME [ARGS]`` (``--list`` lists them). Their figures, with the
commands, machines and dates, are quoted in docs/benchmarks/; benchmarks/README.md says how to run
and add one."""
