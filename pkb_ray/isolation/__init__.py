"""The one process layer: rank processes started in a sandbox (:mod:`.sandbox`,
:mod:`.allowlist`, forked from warm templates by :mod:`.zygote`), driven as sets
(:mod:`.ranks`; over nodes :mod:`.spread`; kept warm by :mod:`.rank_pool`), stopped and proven
stopped (:mod:`.freezer`), read and written by the trusted side (:mod:`.memory`) and reaped with
everything they started (:mod:`.reaper`).

May import: spec, measure, runner.
"""
