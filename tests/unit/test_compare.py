"""pkb_ray.summary.compare on two runs' result frames built as real rows (pkb_ray.spec.schema): runs drawn
from one distribution flag nothing; lost correct samples or halved speedups are flagged, on runs
with a dozen samples a problem and on runs shaped like the shipped replay set (2 to 11); the
paired test where both runs hold the same sources, the unpaired one otherwise; the gatekeeping
rule's error control, measured."""

import random

import numpy as np
import pytest

from benchmarks import compare_power as power
from conftest import REPO
from pkb_ray.generate.samples import read_samples
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, Sample, results_to_table
from pkb_ray.summary import RunSummary
from pkb_ray.summary.compare import ALPHA, EXACT_PAIRS, PERMUTATIONS, compare, gatekeeping, sign_flip_p
from pkb_ray.summary.render_compare import markdown, text

PROBLEMS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def summary_of(rows: list[Result]) -> RunSummary:
    df = results_to_table(rows).to_pandas()
    return RunSummary.of(df.assign(nodes=df["nodes"].fillna(1).astype(int), round=df["round"].fillna(0).astype(int)))


def run(seed: int, p_correct: float = 0.7, speed: float = 1.3, samples: int = 12, model: str = "m",
        generation: int = 0, statuses: int | None = None) -> RunSummary:
    """One model's run: each sample correct with chance ``p_correct`` (drawn with ``statuses``, by
    default ``seed``), at a speedup around ``speed``; runs of one ``generation`` hold the same sources."""
    rng, timing, rows = random.Random(seed if statuses is None else statuses), random.Random(f"timing {seed}"), []
    for pid in PROBLEMS:
        for i in range(samples):
            ok = rng.random() < p_correct
            s = Sample(problem_id=pid, model=model, sample_index=i, source=f"# {pid} {i} {generation}\n")
            speedup = speed * timing.lognormvariate(0, 0.2) if ok else None
            rows.append(Result.for_sample(s, Status.CORRECT if ok else Status.WRONG_OUTPUT, "", world_size=2,
                                          hardware="h200_2", category="collective", speedup=speedup,
                                          sol_fraction=speedup and speedup / 10))
    return summary_of(rows)


# The shipped replay set's shape, as benchmarks/compare_power.py builds it (its docstring says where
# the speedups and the noise come from); `python -m benchmarks compare_power` prints what
# docs/statistics.md quotes.
REPLAY = read_samples(REPO / "samples" / "replay")


def replay(seed: int, generation: int = 0, turned: float = 0.0, speed: float = 1.0) -> RunSummary:
    return summary_of(power.run(seed, generation, turned, speed))


@pytest.fixture(scope="module")
def baseline() -> RunSummary:
    return replay(1)


def every(c):
    return c.table.set_index("problem").loc["ALL"]


def test_the_replay_shape_is_the_shipped_set():
    sizes = sorted(np.unique([s["problem_id"] for s in REPLAY], return_counts=True)[1])
    assert len(REPLAY) == 27 and sizes[0] == 2 and sizes[-1] == 11 and len(sizes) == 8
    assert sum(s["metadata"]["expect"] == "correct" for s in REPLAY) == 11


def test_the_same_rows_against_themselves_flag_nothing(baseline):
    c = compare(baseline, baseline)
    assert c.regressions.empty and set(c.table["test"]) == {"paired"}, text(c)
    for m in ("pass@1", "fast_1.0@1", "speedup"):
        assert (c.table[f"p {m}"].dropna() == 1.0).all()  # no difference has a sign to flip
    assert every(c)["speedup B/A"] == 1.0 and every(c)["speedup B/A_lo"] == every(c)["speedup B/A_hi"] == 1.0


@pytest.mark.parametrize("generation,test", [(0, "paired"), (1, "unpaired")])
def test_replay_runs_differing_only_by_timing_noise_flag_nothing(baseline, generation, test):
    for seed in (2, 3, 4, 5):
        c = compare(baseline, replay(seed, generation))
        assert c.regressions.empty and set(c.table["test"]) == {test}, text(c)
        assert every(c)["p pass@1"] > 0.5  # the statuses did not change


def test_80_percent_of_correct_samples_turned_wrong_is_flagged_on_the_all_row(baseline):
    c = compare(baseline, replay(2, turned=0.8))  # 9 of the 11 correct samples
    row = every(c)
    assert row["test"] == "paired" and "pass@1" in row["regressed"].split() and row["Δ pass@1_hi"] < 0
    assert row["p pass@1"] == 1 / 2 ** 9  # exact: only all nine signs negative are as extreme
    assert "speedup" not in row["regressed"]  # the two left are as fast as before
    unpaired = every(compare(baseline, replay(2, generation=1, turned=0.8)))  # other sources of that shape
    assert unpaired["test"] == "unpaired" and unpaired["p pass@1"] > row["p pass@1"]


def test_halved_speedups_on_the_replay_set_are_flagged_on_the_all_row(baseline):
    c = compare(baseline, replay(2, speed=0.5))
    row = every(c)
    assert row["test"] == "paired" and "speedup" in row["regressed"].split() and row["speedup B/A_hi"] < 1
    assert row["p speedup"] == 1 / 2 ** 11  # every one of the 11 pairs slower: the one extreme pattern
    assert 0.45 < row["speedup B/A"] < 0.6 and "pass@1" not in row["regressed"]
    unpaired = every(compare(baseline, replay(2, generation=1, speed=0.5)))
    assert unpaired["test"] == "unpaired" and unpaired["p speedup"] > row["p speedup"]


def test_per_problem_rows_are_tested_only_under_a_rejected_all_row(baseline):
    c = compare(baseline, replay(2, speed=0.5))
    rows = c.table.set_index("problem")
    assert rows.loc["ALL", "p pass@1"] == 1.0 and not any("pass@1" in r for r in rows["regressed"])
    # all_reduce: 3 pairs, each slower: p = 1/8, above every share of alpha, so not flagged under its gate
    assert rows.loc["all_reduce", "p speedup"] == 1 / 8 and rows.loc["all_reduce", "regressed"] == ""
    md = markdown(c, "A", "B")
    assert "| paired |" in md and "paired" in text(c)


def test_runs_of_one_distribution_flag_nothing():
    for seed in (1, 2, 3):
        for generation, test in ((0, "paired"), (seed, "unpaired")):
            c = compare(run(seed), run(seed + 10, generation=generation))
            assert len(c.table) == len(PROBLEMS) + 1 and c.regressions.empty, text(c)
            assert set(c.table["problem"]) == {*PROBLEMS, "ALL"} and not c.only_a and not c.only_b
            assert set(c.table["test"]) == {test}
            row = every(c)
            assert row["Δ pass@1_lo"] <= row["Δ pass@1"] <= row["Δ pass@1_hi"]


@pytest.mark.parametrize("generation", [0, 1])
def test_lost_correct_samples_are_a_pass_rate_regression(generation):
    c = compare(run(1), run(2, p_correct=0.15, generation=generation))
    row = every(c)
    assert "pass@1" in row["regressed"].split() and row["Δ pass@1_hi"] < 0
    assert row["p pass@1"] < 0.01


@pytest.mark.parametrize("generation", [0, 1])
def test_halved_speedups_are_a_speedup_regression_and_not_a_pass_rate_one(generation):
    c = compare(run(1), run(2, speed=0.65, generation=generation, statuses=1))  # A's statuses, slower
    row = every(c)
    assert "speedup" in row["regressed"].split() and row["speedup B/A_hi"] < 1
    assert 0.4 < row["speedup B/A"] < 0.6
    assert all("pass@1" not in r.split() for r in c.table["regressed"])


def test_one_correct_sample_a_side_is_never_significant():
    for generation in (0, 1):  # paired: one sign to flip a problem; unpaired: two labels to swap
        a = run(1, p_correct=1.0, samples=1)
        b = run(2, p_correct=1.0, samples=1, speed=0.2, generation=generation)
        c = compare(a, b)
        p = c.table.set_index("problem")["p speedup"]
        assert c.regressions.empty and (p.drop("ALL") > 0.4).all()  # either order: p = 1/2
        assert p["ALL"] > 1 / 16 - 0.01  # 4 such problems: at best 1/2^4, never below 0.05


def test_pairing_needs_the_same_sources_in_every_problem():
    a = run(1)
    rows = a.rows.copy()
    assert set(compare(a, rows).table["test"]) == {"paired"}  # a run's rows stand for the run
    one = rows.index[0]
    rows.loc[one, "sample_key"] = rows.loc[one, "sample_key"][:-4] + "beef"  # one sample regenerated
    assert set(compare(a, rows).table["test"]) == {"unpaired"}


def test_two_single_model_runs_compare_their_models_and_list_unshared_problems():
    a, b = run(1, model="old"), run(2, model="new")
    c = compare(a, b)
    assert set(c.table["model"]) == {"old -> new"} and set(c.table["test"]) == {"paired"}  # the same sources
    rows = b.rows[b.rows["problem_id"] != "broadcast"]
    c = compare(a, RunSummary.of(rows))
    assert c.only_a == ["old -> new / broadcast"] and "broadcast" not in set(c.table["problem"])
    assert all(len(line) <= 120 for line in text(c).splitlines())


def test_the_sign_flip_p_is_exact_and_never_too_small_under_no_change():
    assert sign_flip_p(np.array([-1.0, -1.0, -1.0])) == 1 / 8 and sign_flip_p(np.zeros(4)) == 1.0
    assert sign_flip_p(np.array([-1.0, 1.0])) == 3 / 4  # patterns: (-1, 1), (1, -1) tie, (-1, -1) below
    rng = np.random.default_rng(7)
    for m in (EXACT_PAIRS - 6, EXACT_PAIRS + 14):  # exact, then random patterns
        reps = 400 if m <= EXACT_PAIRS else 150
        ps = np.array([sign_flip_p(rng.normal(size=m)) for _ in range(reps)])
        for level in (0.05, 0.2):
            rate = (ps <= level).mean()
            assert rate <= level + 3 * np.sqrt(level * (1 - level) / reps), (m, level, rate)
    assert sign_flip_p(-np.ones(EXACT_PAIRS + 14)) == 1 / (1 + PERMUTATIONS)


def test_gatekeeping_gives_a_family_its_gates_share_and_passes_a_finished_family_on():
    a = ALPHA
    # three gates at alpha/3 each; gate 0 rejected, its family gets alpha/3, split by Holm
    gates, fams = gatekeeping([0.001, 0.5, 0.5], [[0.008, 0.5], [0.0, 0.0], [0.0, 0.0]], a)
    assert gates == [True, False, False] and fams == [[True, False], [False, False], [False, False]]
    _, fams = gatekeeping([0.001, 0.5, 0.5], [[0.009, 0.5], [], []], a)
    assert fams[0] == [False, False]  # 0.009 > (alpha/3)/2
    # a gate only just above alpha/3: rejected only once gate 0's family is done, and it passes its share on
    assert gatekeeping([0.001, 0.02, 0.5], [[0.001], [], []], a)[0] == [True, True, False]
    assert gatekeeping([0.001, 0.02, 0.5], [[0.001, 0.9], [], []], a)[0] == [True, False, False]
    # untestable gates (NaN) take no share and keep their family untested
    gates, fams = gatekeeping([np.nan, 0.02], [[0.0], [0.0]], a)
    assert gates == [False, True] and fams == [[False], [True]]


def test_gatekeeping_holds_the_family_wise_error_where_every_gate_is_a_real_regression():
    """Each of 3 gates (model x metric) a real regression, driven by one of its 8 problems; the other 7
    true nulls with uniform p. Testing each family at the whole alpha once its gate is rejected would
    flag one of them at rate 1 - 0.95^3 = 0.14; the rule keeps it under alpha."""
    rng, reps, wrong = np.random.default_rng(3), 2000, 0
    for _ in range(reps):
        fams = [np.concatenate([[1e-6], rng.uniform(size=7)]) for _ in range(3)]
        _, rejected = gatekeeping([1e-6] * 3, fams, ALPHA)
        wrong += any(any(r[1:]) for r in rejected)
    assert wrong / reps <= ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / reps), wrong / reps
    nothing = sum(any(gatekeeping(rng.uniform(size=3), [rng.uniform(size=8) for _ in range(3)], ALPHA)[0])
                  for _ in range(reps))  # no regression anywhere: a gate is rejected at most at alpha
    assert nothing / reps <= ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / reps)


def test_a_certain_but_small_change_is_no_change():
    """The same sources, every speedup 7 % lower in B (what one machine's drift between two runs of
    the same code gives): certain, but under the minimum effect, so no regression; 30 % lower is one;
    and with no minimum effect the 7 % drop is flagged (the rule's other half still works)."""
    a = run(3, speed=1.3, generation=1)
    slower = lambda f: summary_of([Result.for_sample(  # noqa: E731
        Sample(problem_id=r.problem_id, model=r.model, sample_index=r.sample_index, source=r.source),
        Status(r.status), "", world_size=2, hardware="h200_2", category="collective",
        speedup=r.speedup * f if r.speedup == r.speedup and r.speedup else None)
        for r in a.rows.itertuples()])
    small, large = compare(a, slower(0.93)), compare(a, slower(0.70))
    assert small.table.iloc[-1]["speedup B/A_hi"] < 1.0  # certain: the whole interval below 1
    assert len(small.regressions) == 0 and "no regression" in text(small)
    assert "speedup" in large.regressions["regressed"].iloc[-1]
    assert len(compare(a, slower(0.93), min_speedup_effect=0.0).regressions) > 0
