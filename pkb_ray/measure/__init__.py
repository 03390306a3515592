"""How one timed call is made, timed and compared: the same code on both sides of the trust
boundary, in the rank processes (:mod:`pkb_ray.runner`) and in the trusted parent. Inputs derive
from secret keys (:mod:`.keys`), timed calls' fresh inputs and the rank's own clock (a diagnostic:
:mod:`.timing`), tensors' layouts, comparisons and tolerances (:mod:`.correctness`).

May import: spec.
"""
