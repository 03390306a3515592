"""Code that runs inside rank processes. The parent imports only the parts both sides share: the
report pipe (:mod:`~pkb_ray.runner.protocol`), the launcher's exit files (:mod:`~pkb_ray.runner.launch`),
the zygote's process names and probe file (:mod:`~pkb_ray.runner.zygote`),
the tensor file format (:mod:`~pkb_ray.runner.tensor_io`) and the extension builder that the
compile stage also runs (:mod:`~pkb_ray.runner.extensions`); the records on the wire are
:mod:`pkb_ray.spec.wire`'s.

May import: spec, measure, problem.
"""
