"""Time W=2 gloo rank sets from start to ready, one after the other, and the CPU their processes used.

``PYTHONPATH=<tree> .venv/bin/python scripts/bench_rank_start.py LABEL [--sets N]``; figures in
docs/benchmarks/throughput.md. Without a sandbox (RankSet's default isolation): the ranks' own start.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from pkb_ray.isolation.ranks import RankSet


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("label")
    p.add_argument("--sets", type=int, default=6)
    args = p.parse_args()
    times = []
    for _ in range(args.sets):
        start = time.monotonic()
        ranks = RankSet(["cpu", "cpu"], backend="gloo", job_dir=Path(tempfile.mkdtemp()))
        ranks.wait_ready(60)
        times.append(time.monotonic() - start)
        ranks.close()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(args.label, "ready s:", [round(t, 2) for t in times],
          "children's CPU s:", round(used.ru_utime + used.ru_stime, 1))


if __name__ == "__main__":
    main()
