"""Every problem: loads, has random per-seed/per-rank inputs and a positive speed of light, and its
reference agrees with its single-process oracle on 2, 3 and 4 gloo ranks; one problem of each
category (and every collective) also goes through the harness as a copied sample."""

import pytest
import torch

from pkb_ray.problem import DTYPES, InputContext, load_problems
from pkb_ray.problems.check import check
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample

ALL = load_problems()
PROBLEM_IDS = sorted(ALL)
FIRST_COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "scatter", "gather",
                     "all_to_all"]
# through the whole harness: the collectives, and the first problem of every other category
HARNESS_IDS = FIRST_COLLECTIVES + sorted({p.meta.category: pid for pid, p in sorted(ALL.items(), reverse=True)
                                          if p.meta.category != "collective"}.values())


def test_first_problems_are_all_there():
    assert set(FIRST_COLLECTIVES) <= set(ALL)


def test_loading_the_problem_set_imports_no_compiler_stack():
    """Every driver, stream worker, compile actor and gang loads all problems: a problem that imports
    torch._dynamo at its top (torch.nn.attention.bias does) made each of them pay a second for it."""
    import subprocess
    import sys

    code = "import sys; from pkb_ray.problem import load_problems; load_problems(); print(sorted(" \
           "m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor', 'triton'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.parametrize("pid", PROBLEM_IDS)
def test_problem_says_what_it_models_and_has_an_oracle(pid):
    p = ALL[pid]
    doc = p.module.__doc__ or ""
    assert "Models:" in doc and len(doc) > 200, f"{pid}: the docstring must name the systems it models"
    assert p.oracle is not None, f"{pid}: no oracle(inputs, size, world_size)"
    assert {"small", "default"} <= set(p.meta.sizes)


@pytest.mark.parametrize("pid", PROBLEM_IDS)
def test_inputs_are_random_per_seed_and_rank(pid):
    p = ALL[pid]
    knobs = p.meta.sizes["small"]
    w = max(2, p.meta.world_sizes.min)
    w += (-w) % p.meta.world_sizes.multiple_of

    def values(seed, rank):
        ctx = InputContext(size=knobs, rank=rank, world_size=w, dtype=DTYPES[p.meta.dtypes[0]],
                           device=torch.device("cpu"), seed=seed)
        return torch.cat([a.flatten().double() for a in p.make_inputs(ctx) if isinstance(a, torch.Tensor)])

    def same(x, y):  # NaN equals NaN: a problem may plant NaNs on purpose
        return x.shape == y.shape and torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(), y.nan_to_num())

    a = values(2, 1)
    assert same(a, values(2, 1))  # reproducible: the reference process and the candidate's agree
    assert not same(a, values(3, 1))
    assert not same(a, values(2, 0))
    assert a.numel() > 0 and a.unique().numel() > a.numel() // 10  # not a constant fill


@pytest.mark.parametrize("pid", PROBLEM_IDS)
def test_speed_of_light_is_positive_and_grows_with_size(pid):
    p = ALL[pid]
    w = max(4, p.meta.world_sizes.min)
    w += (-w) % p.meta.world_sizes.multiple_of
    dtype = DTYPES[p.meta.dtypes[0]]
    small = p.speed_of_light(p.meta.sizes["small"], w, dtype)
    default = p.speed_of_light(p.meta.sizes["default"], w, dtype)
    assert small.interconnect_bytes > 0 and small.hbm_bytes > 0
    # a flag or a norm is latency-bound at every size: its bytes need not grow, the rest must
    assert default.interconnect_bytes >= small.interconnect_bytes
    assert default.hbm_bytes + default.flops > small.hbm_bytes + small.flops


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_references_agree_with_their_oracles(world_size):
    failures = check(ALL, PROBLEM_IDS, world_size, presets=("small",), seeds=(0, 1))
    assert not failures, "\n".join(f"{k}: {v[-1500:]}" for k, v in failures.items())


def test_the_check_catches_a_wrong_reference(tmp_path):
    src = ALL["all_reduce"].source().replace("dist.all_reduce(out, op=dist.ReduceOp.SUM)",
                                             "dist.all_reduce(out, op=dist.ReduceOp.SUM)\n    out[0] += 1")
    (tmp_path / "all_reduce.py").write_text(src)
    failures = check(load_problems(tmp_path), ["all_reduce"], 2, seeds=(0,))
    assert list(failures) == ["all_reduce|small|float32|0"] and "disagree" in failures["all_reduce|small|float32|0"]


def test_the_check_catches_inputs_that_are_not_the_same_for_a_seed(tmp_path):
    # on a GPU a write through repeated indices keeps an arbitrary value; here: an unseeded draw
    src = ALL["all_reduce"].source().replace("def make_inputs(ctx: InputContext):",
                                             "def make_inputs(ctx: InputContext):\n    return (torch.rand(8),)\n\n\n"
                                             "def _make_inputs(ctx: InputContext):")
    (tmp_path / "all_reduce.py").write_text(src)
    failures = check(load_problems(tmp_path), ["all_reduce"], 2, seeds=(0,))
    assert "same seed on a second call" in failures["all_reduce|small|float32|0"], failures


def test_a_reference_that_kills_its_rank_fails_alone(tmp_path):
    # rank 1 dies inside all_gather's reference; the problems before and after it are still checked
    for pid in ("all_reduce", "broadcast"):
        (tmp_path / f"{pid}.py").write_text(ALL[pid].source())
    src = ALL["all_gather"].source().replace("def solution(", "def _solution(")
    src += "\n\ndef solution(*args):\n    if dist.get_rank() == 1:\n        import os\n        os._exit(3)\n" \
           "    return _solution(*args)\n"
    (tmp_path / "all_gather.py").write_text(src)
    failures = check(load_problems(tmp_path), ["all_reduce", "all_gather", "broadcast"], 2, seeds=(0,), timeout_s=20)
    assert list(failures) == ["all_gather|small|float32|0"], failures
    assert "ranks died or hung" in failures["all_gather|small|float32|0"]


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("pid", HARNESS_IDS)
def test_copy_of_reference_is_correct(shared_harness, pid, world_size):
    if not ALL[pid].meta.world_sizes.supports(world_size):
        pytest.skip(f"{pid} does not run at W={world_size}")
    h = shared_harness(world_size, rounds=5)  # one per world size, as a gang's
    sample = Sample(problem_id=pid, model="test", sample_index=0, source=ALL[pid].source())
    result = h.evaluate(sample)
    assert result.status == Status.CORRECT, result.message
    assert len(result.ref_median_us) == world_size
    assert result.speedup and result.speedup > 0
    assert result.sol_time_us and result.sol_fraction and result.sol_fraction > 0
    assert {t.rank for t in result.trials} == set(range(world_size))


def test_the_problem_list_in_docs_is_up_to_date():
    import subprocess
    import sys

    from conftest import REPO

    done = subprocess.run([sys.executable, str(REPO / "scripts/problems_doc.py"), "--check"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
