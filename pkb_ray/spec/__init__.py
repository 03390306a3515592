"""What every room speaks, and nothing that runs: the config and its composition from conf/
(:mod:`.config`, :mod:`.compose`), where pkb_ray's own folders are (:mod:`.paths`), the names of
statuses, sides, roles and modes (:mod:`.names`), a sample and a result row (:mod:`.schema`), the
records between the parent and its rank processes (:mod:`.wire`), gang layouts and how many fit
(:mod:`.placement`), and the registry of sample formats (:mod:`.formats`, which finds imported
benchmarks' subpackages by name at run time).

Pure: no Ray, no processes, no torch at import.
May import: nothing.
"""
