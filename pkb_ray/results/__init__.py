"""Result rows at rest and what they add up to: the Parquet folder (:mod:`.parquet`), where a run's
folders live, local or at a URI (:mod:`.storage`), the scores (:mod:`.metrics`) and their
intervals (:mod:`.intervals`). Pure: no Ray, no processes.

May import: spec.
"""
