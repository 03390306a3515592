"""Time W=2 gloo rank sets from start to ready, one after the other, and the CPU their processes used.

    .venv/bin/python -m benchmarks rank_start LABEL [--sets N]

Figures in docs/benchmarks/throughput.md. Without a sandbox (RankSet's default isolation): the
ranks' own start. Another tree's pkb_ray, for before/after: ``cd <tree> && PYTHONPATH=<tree>:<this
checkout> python -m benchmarks rank_start LABEL``.
"""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path

from benchmarks import common
from pkb_ray.isolation.ranks import RankSet


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    p = run.parser(__doc__)
    p.add_argument("label", help="names the tree or setting measured, in the output")
    p.add_argument("--sets", type=int, default=6)
    args = p.parse_args(argv)
    out = run.out(args.out)
    times = []
    for _ in range(args.sets):
        start = time.monotonic()
        ranks = RankSet(["cpu", "cpu"], backend="gloo", job_dir=Path(tempfile.mkdtemp()))
        ranks.wait_ready(60)
        times.append(time.monotonic() - start)
        ranks.close()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = round(used.ru_utime + used.ru_stime, 1)
    print(args.label, "ready s:", [round(t, 2) for t in times], "children's CPU s:", cpu)
    print("wrote", run.write(out, {"label": args.label, "ready_s": [round(t, 3) for t in times],
                                   "children_cpu_s": cpu}))
    return 0
