"""Why the best speedup has no interval: how often a 95 % percentile bootstrap interval of a
problem's best-of-n speedup (pkb_ray.results.intervals' draws: 1000, seed 0) holds what it would claim to.

    .venv/bin/python scripts/bench_best_of_n_interval.py [--trials 2000]

Speedups of one problem are drawn log-normal (sigma 0.5, as the spread of one model's samples);
for n samples, the interval is taken from the bootstrap of their maximum and checked against the
expected best of n (worked out from 200,000 simulated runs) and against the best of a fresh run of
n. docs/statistics.md has the figures.
"""

from __future__ import annotations

import argparse

import numpy as np

from pkb_ray.results import intervals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--sigma", type=float, default=0.5)
    args = parser.parse_args()
    rng = np.random.default_rng(123)
    print("n    covers E[best of n]  covers a fresh run's best  upper end is the observed best")
    for n in (4, 8, 25, 100):
        expected = np.exp(rng.normal(0, args.sigma, (200_000, n))).max(axis=1).mean()
        r = intervals.resample([n])
        hits_expected = hits_fresh = at_top = 0
        for _ in range(args.trials):
            x = np.exp(rng.normal(0, args.sigma, n))
            lo, hi = intervals.interval(x[r.index].max(axis=1))
            hits_expected += lo <= expected <= hi
            hits_fresh += lo <= np.exp(rng.normal(0, args.sigma, n)).max() <= hi
            at_top += hi == x.max()
        t = args.trials
        print(f"{n:<4} {hits_expected / t:>19.0%}  {hits_fresh / t:>25.0%}  {at_top / t:>30.0%}")


if __name__ == "__main__":
    main()
