"""What ``pkb-ray compare`` flags on runs shaped like the shipped replay set (27 samples of 8
problems, 2 to 11 a problem): the p values of the ALL row and the flags, per scenario, paired
(the same sources evaluated twice) and unpaired (other generations of the same shape); then how
often runs that differ only by timing noise are flagged (the false-flag rate).

    .venv/bin/python -m benchmarks compare_power --null-runs 200

No sweep: each run's result rows are written with pkb_ray.results.parquet.write_results to a folder and
read back as the command reads them (pkb_ray.summary.cli.read_runs). Statuses are the samples'
``# expect:``; a correct sample's speedup is its measured one on 2 x H200
(docs/benchmarks/data/bench_replay_h200x2_small.json, rounded: reference copies 1.0, one_shot 0.90,
chunked_slower 0.20, direct_sends 0.81) times lognormal timing noise of each run's own, sigma 0.1
(the CPU noise model of docs/benchmarks/timing.md: a reference copy's speedup has stdev 0.097).
docs/statistics.md quotes the output.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from benchmarks import common
from pkb_ray.generate.samples import read_samples
from pkb_ray.results.metrics import as_scored, final_and_rounds
from pkb_ray.results.parquet import write_results
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, Sample
from pkb_ray.summary.cli import read_runs
from pkb_ray.summary.compare import ALL, METRICS, compare
from pkb_ray.summary.run import RunSummary

REPO = common.REPO
SPEEDUP = {"one_shot": 0.90, "chunked_slower": 0.20, "direct_sends": 0.81}  # others (reference copies): 1.0
NOISE = 0.1


def run(seed: int, generation: int = 0, turned: float = 0.0, speed: float = 1.0) -> list[Result]:
    """One evaluation of the replay set: timing noise drawn with ``seed``; ``turned``: the share of
    correct samples made ``wrong_output`` (chosen with ``seed``); ``speed``: a factor on every
    speedup; ``generation`` > 0: other sources of the same shape (their hashes differ)."""
    rng = random.Random(seed)
    samples = read_samples(REPO / "samples" / "replay")
    correct = [i for i, s in enumerate(samples) if s["metadata"]["expect"] == Status.CORRECT.value]
    wrong = set(rng.sample(correct, round(turned * len(correct))))
    out = []
    for i, s in enumerate(samples):
        source = s["source"] + (f"\n# generation {generation}\n" if generation else "")
        sample = Sample(problem_id=s["problem_id"], model="replay", sample_index=s["sample_index"], source=source)
        status = Status.WRONG_OUTPUT if i in wrong else Status(s["metadata"]["expect"])
        noise = rng.lognormvariate(0, NOISE)  # drawn for every sample: the same samples get the same draws
        speedup = SPEEDUP.get(s["metadata"]["label"], 1.0) * noise * speed if status == Status.CORRECT else None
        out.append(Result.for_sample(sample, status, "", world_size=2, hardware="cpu_2", speedup=speedup))
    return out


def summary(rows: list[Result], tmp: Path) -> RunSummary:
    """The run as ``pkb-ray compare`` reads it: written to a folder, read back."""
    folder = Path(tempfile.mkdtemp(dir=tmp))
    write_results(rows, folder)
    return RunSummary.of(read_runs([folder]))


def scored(rows: list[Result], tmp: Path):
    """Only the rows :func:`compare` uses (:attr:`RunSummary.rows`), without the rest of the summary."""
    folder = Path(tempfile.mkdtemp(dir=tmp))
    write_results(rows, folder)
    return final_and_rounds(as_scored(read_runs([folder])))[0]


SCENARIOS = {  # name -> B's run (A: run(1))
    "the same rows": lambda g: run(1, g),
    "timing noise only": lambda g: run(2, g),
    "80 % of correct samples wrong": lambda g: run(2, g, turned=0.8),
    "every speedup halved": lambda g: run(2, g, speed=0.5),
}


def holm_over_every_row(table, alpha: float = 0.05) -> str:
    """What the former rule flagged: Holm over every row's every test at once (and the interval)."""
    tests = sorted((table.at[i, f"p {m}"], i, m) for i in table.index for m in METRICS
                   if table.at[i, f"p {m}"] == table.at[i, f"p {m}"])
    below = {"pass@1": "Δ pass@1_hi", "fast_1.0@1": "Δ fast_1.0@1_hi", "speedup": "speedup B/A_hi"}
    flagged = []
    for rank, (p, i, m) in enumerate(tests):
        if p > alpha / (len(tests) - rank):
            break
        if table.at[i, below[m]] < (1 if m == "speedup" else 0):
            flagged.append(f"{table.at[i, 'problem']}: {m}")
    return ", ".join(flagged) or "-"


def main(argv: list[str]) -> int:
    run_ = common.Run.of(__name__, argv)
    ap = run_.parser(__doc__)
    ap.add_argument("--null-runs", type=int, default=200, help="pairs of noise-only runs for the false-flag rate")
    args = ap.parse_args(argv)
    out = run_.out(args.out)
    scenarios, false_flags = [], {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        a = summary(run(1), tmp)
        print(f"{'B against A = run(1)':31s} {'test':9s} {'p pass@1':>9s} {'p fast':>7s} {'p speedup':>9s} "
              f"{'speedup B/A [95%]':>18s}  {'flagged':15s} former rule flagged")
        for name, make in SCENARIOS.items():
            for generation in (0, 1):  # 0: the same sources (paired); 1: other generations (unpaired)
                if name == "the same rows" and generation:
                    continue
                c = compare(a, summary(make(generation), tmp))
                r = c.table.set_index("problem").loc[ALL]
                ratio = f"{r['speedup B/A']:.2f} [{r['speedup B/A_lo']:.2f}, {r['speedup B/A_hi']:.2f}]"
                flagged = ", ".join(c.regressions["problem"] + ": " + c.regressions["regressed"]) or "-"
                former = holm_over_every_row(c.table)
                print(f"{name:31s} {r['test']:9s} {r['p pass@1']:9.4f} {r['p fast_1.0@1']:7.4f} {r['p speedup']:9.4f} "
                      f"{ratio:>18s}  {flagged:15s} {former}")
                scenarios.append({"scenario": name, "generation": generation, "test": r["test"],
                                  "p_pass@1": r["p pass@1"], "p_fast_1.0@1": r["p fast_1.0@1"],
                                  "p_speedup": r["p speedup"], "speedup_ratio": ratio, "flagged": flagged,
                                  "former_rule_flagged": former})
        for generation, test in ((0, "paired"), (1, "unpaired")):
            flagged = sum(len(compare(scored(run(1000 + 2 * i), tmp), scored(run(1001 + 2 * i, generation), tmp))
                              .regressions) > 0 for i in range(args.null_runs))
            false_flags[test] = flagged
            print(f"noise only, {test}: {flagged} of {args.null_runs} pairs of runs flagged")
    print("wrote", run_.write(out, {"noise_sigma": NOISE, "null_runs": args.null_runs, "scenarios": scenarios,
                                    "noise_only_pairs_flagged": false_flags}))
    return 0
