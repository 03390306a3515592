"""Code the benchmarks run but that is no benchmark of its own (not in the registry)."""
