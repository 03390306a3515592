"""ParallelKernelBench (PKB) through pkb_ray: its problems from a checkout, its solution folders as samples.

- :mod:`.checkout` reads a checkout: reference files, their numbers and stable names, content hashes;
- :mod:`.shims` writes one native pkb_ray problem file per reference (no PKB code in it) at start;
- :mod:`.runtime` is what those files call inside rank processes (PKB's input builder, its groups);
- :mod:`.solutions` reads folders of PKB solution files as samples, matched to problems by name;
- :mod:`.verdict` is PKB's own correctness rule (the results' ``pkb_verdict``);
- :mod:`.format` is all of the above as the core sees it: PKB's :class:`pkb_ray.spec.formats.SampleFormat`,
  registered as ``pkb``. No module outside this package imports it except through that registry.

No PKB code enters this repository: everything PKB is read from the user's checkout at run time.

May import: spec, measure, pipeline, problems.
"""
