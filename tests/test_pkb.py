"""ParallelKernelBench through pkb_ray, on the stand-in checkout and solutions in tests/pkb (our own
files in PKB's formats): problems from a checkout, samples from its solution folders, the static
refusals, the inputs PKB's builder makes, and PKB's own verdict beside pkb_ray's."""

import shutil

import pytest
import torch

from conftest import REPO
from pkb_ray.generate.samples import read_samples
from pkb_ray.measure.correctness import compare
from pkb_ray.pipeline.selection import with_problems_folder
from pkb_ray.pipeline.validate import validate
from pkb_ray.pkb import runtime
from pkb_ray.pkb.checkout import CheckoutError, references
from pkb_ray.pkb.shims import write_shims
from pkb_ray.pkb.solutions import number_mismatches
from pkb_ray.pkb.verdict import pkb_agrees
from pkb_ray.problem import InputContext, load_problems
from pkb_ray.problems.backend_rules import multicast_use, pk_world_size
from pkb_ray.spec.config import ConfigError, SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import Result, Sample, Where

CHECKOUT = REPO / "tests/pkb/checkout"
SOLUTIONS = REPO / "tests/pkb/solutions"


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    return load_problems(write_shims(CHECKOUT, tmp_path_factory.mktemp("shims")))


def test_a_checkout_becomes_problems_named_stably(problems, tmp_path):
    assert sorted(problems) == ["pkb_allreduce", "pkb_grouped_linear", "pkb_scaled_allgather", "pkb_tp_rms_norm"]
    p = problems["pkb_allreduce"]
    assert p.meta.category == "collective" and p.module.NUMBER == 1 and p.signature == ["x"]
    assert p.meta.dtypes[0] == "bfloat16" and p.tolerance("bfloat16").atol == 1e-2 and "PKB" in p.tolerance("bfloat16").reason
    assert p.meta.sizes["default"] == {"m": 1024, "n": 1024}
    assert "def solution" not in p.source()  # the file points at the checkout; it copies nothing of it
    # the same checkout gives the same folder; an edited reference gives another one
    assert write_shims(CHECKOUT, tmp_path) == write_shims(CHECKOUT, tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(CHECKOUT, copy)
    (copy / "reference/1_allreduce.py").write_text((copy / "reference/1_allreduce.py").read_text() + "\n# edited\n")
    assert write_shims(copy, tmp_path) != write_shims(CHECKOUT, tmp_path)


def test_a_missing_or_wrong_checkout_fails_at_start_naming_pkb_root(tmp_path):
    with pytest.raises(ConfigError, match="pkb.root"):
        with_problems_folder(SweepConfig.model_validate({"problems": {"format": "pkb"}}))
    with pytest.raises(ConfigError, match=f"pkb.root={tmp_path}.*not a ParallelKernelBench checkout"):
        with_problems_folder(SweepConfig.model_validate({"problems": {"format": "pkb"}, "pkb": {"root": str(tmp_path)}}))
    (tmp_path / "reference").mkdir()
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils/input_output_tensors.py").write_text("")
    for name in ("1_all_Reduce.py", "2_all_reduce.py"):
        (tmp_path / "reference" / name).write_text("def solution(x):\n    return x\n")
    with pytest.raises(CheckoutError, match="also used by"):
        references(tmp_path)


def test_inputs_come_from_pkbs_builder_and_constant_ones_are_drawn_anew(problems):
    def inputs(number, seed, faithful, rank=0):
        ctx = InputContext(size={"m": 4, "n": 3}, rank=rank, world_size=2, dtype=torch.float32,
                           device=torch.device("cpu"), seed=seed)
        return runtime.make_inputs(ctx, str(CHECKOUT), number, faithful)

    assert torch.equal(inputs(1, 0, True)[0], torch.full((4, 3), 1.0))  # PKB's own (constant) input
    assert torch.equal(inputs(1, 5, True)[0], inputs(1, 0, True)[0])
    drawn = [inputs(1, s, False)[0] for s in (0, 1)]
    assert not torch.equal(drawn[0], drawn[1]) and not torch.equal(drawn[0], torch.full((4, 3), 1.0))
    assert torch.equal(inputs(1, 0, False, rank=1)[0], inputs(1, 0, False, rank=1)[0])  # still one per seed
    # a builder that draws at random is left as it is: PKB's inputs, with pkb_ray's seed as the trial
    assert torch.equal(inputs(2, 3, False)[0], inputs(2, 3, True)[0])
    assert not torch.equal(inputs(2, 3, False)[0], inputs(2, 4, False)[0])


def test_solution_folders_are_matched_by_name_with_aliases_and_mismatched_numbers_noted(problems):
    rows = read_samples(SOLUTIONS)
    number_mismatches(rows, {pid: p.module.NUMBER for pid, p in problems.items()})
    assert {r["model"] for r in rows} == {"tiny-model", "ext-model"}  # the model is the run folder's
    rows = [r for r in rows if r["model"] == "tiny-model"]
    by_file = {r["metadata"]["file"]: r for r in rows}
    assert len(rows) == 7
    assert by_file["5_rms_norm_cuda.py"]["problem_id"] == "pkb_tp_rms_norm"
    assert by_file["5_rms_norm_cuda.py"]["metadata"]["pkb_alias"] == "rms_norm -> tp_rms_norm"
    assert "is 4" in by_file["5_rms_norm_cuda.py"]["metadata"]["pkb_number_mismatch"]
    assert by_file["7_scaled_allgather_cuda.py"]["problem_id"] == "pkb_scaled_allgather"
    assert "pkb_number_mismatch" not in by_file["1_allreduce_cuda.py"]["metadata"]
    assert by_file["1_allreduce_cuda.py"]["metadata"]["provider"] == "test"
    pk = by_file["1_allreduce_parallelkittens.py"]
    assert pk["backend"] == "parallelkittens" and pk["sample_index"] == 1  # after the cuda one of the problem
    # validation: PKB calls solution(*inputs), so only the count of parameters must match
    ok = validate(by_file["1_allreduce_cuda.py"], problems, 2)
    assert isinstance(ok, Sample)
    removed = validate(by_file["46_fsdp_adamw_sharded_cuda.py"], problems, 2)
    assert removed.status == Status.INVALID_SAMPLE and "removed from PKB upstream" in removed.message
    arity = dict(by_file["1_allreduce_cuda.py"], source="def solution(a, b):\n    return a\n")
    assert "takes 2 arguments; the reference takes 1" in validate(arity, problems, 2).message


def test_multicast_samples_are_refused_before_anything_runs(problems):
    pk = next(r for r in read_samples(SOLUTIONS) if r["backend"] == "parallelkittens")
    refused = validate(pk, problems, Where(Layout(1, 2), hardware="h200_2"), multicast=False)
    assert isinstance(refused, Result) and refused.status == Status.UNSUPPORTED_HARDWARE
    assert "h200_2" in refused.message and "barrier_t<NUM_DEVICES>" in refused.message
    # with multicast allowed, it still runs only at the world size it was built for
    built_for = validate(pk, problems, 2, multicast=True)
    assert built_for.status == Status.INVALID_SAMPLE and "built for 8 devices" in built_for.message
    assert isinstance(validate(pk, problems, 8, multicast=True), Sample)


@pytest.mark.parametrize("source, backend, found", [
    ("t = create_parallel_tensor(shape, dtype)", "parallelkittens", "create_parallel_tensor"),
    ("t = create_parallel_tensor(shape, dtype, multicast=False)", "parallelkittens", ""),
    ("using G = pgl<gl<bf16, 1, 1, -1, -1>, 2, false>;", "parallelkittens", ""),
    ("using G = pgl<gl<bf16, 1, 1, -1, -1>, 2>;", "parallelkittens", "pgl<"),
    ("b = get_or_create_barrier(rank)", "parallelkittens", "get_or_create_barrier"),
    ("multimem<bf16>::ld_reduce(x)", "parallelkittens", "multimem"),
    ("multimem.ld_reduce in a comment of a cuda sample", "cuda", ""),
    ("cuMulticastCreate(&handle, &prop);", "cuda", "cuMulticastCreate"),
])
def test_what_counts_as_multicast(source, backend, found):
    assert (found in multicast_use(source, backend)) if found else multicast_use(source, backend) == ""


def test_pk_world_size():
    assert pk_world_size("constexpr int NUM_DEVICES = 2;") == 2 and pk_world_size("no constant") == 8


def test_pkbs_rule_beside_pkb_rays():
    e = (torch.ones(4, dtype=torch.bfloat16), {"n": 3})
    assert pkb_agrees(e, (torch.ones(4, dtype=torch.float64), {"n": 3}))  # dtype not compared
    assert compare(e, (torch.ones(4, dtype=torch.float64), {"n": 3}), 1e-2, 1e-2) is not None
    assert pkb_agrees(e, (torch.ones(4) * 1.005, {"n": 3})) and not pkb_agrees(e, (torch.ones(4) * 1.5, {"n": 3}))
    assert not pkb_agrees(e, (torch.full((4,), float("nan")), {"n": 3}))  # NaN never equal
    assert not pkb_agrees(e, (torch.ones(5), {"n": 3})) and not pkb_agrees(e, (torch.ones(4), {"n": 4}))


def test_a_sweep_over_pkb_problems_and_solutions_gives_both_verdicts(tmp_path, shared_ray):
    import os
    import subprocess
    import sys

    from pkb_ray.results.parquet import read_results
    from pkb_ray.summary.tables import verdicts

    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={run_dir}", "ray.include_dashboard=false",
         "problems=pkb", f"pkb.root={CHECKOUT}", f"pkb.shim_dir={tmp_path / 'shims'}", f"model.samples={SOLUTIONS}",
         # 60 s: a fresh clean set's first PKB reference has taken over 20 s beside the suite's other worker
         "eval.dtype=float32", "eval.timeout_s=60", "eval.rounds=10", f"cache_dir={tmp_path / 'cache'}",
         *shared_ray.overrides(2)],
        cwd=tmp_path, env=shared_ray.env(dict(os.environ, RAY_DISABLE_USAGE_STATS="1")), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = read_results(run_dir / "results")
    mine = df[df["model"] == "tiny-model"]
    got = {(r.problem_id, r.backend): (r.status, r.pkb_verdict) for r in mine.itertuples()}
    assert got == {
        ("pkb_allreduce", "cuda"): ("correct", True),  # through utils.cuda_helpers of the checkout
        ("pkb_allreduce", "parallelkittens"): ("unsupported_hardware", None),
        ("pkb_scaled_allgather", "cuda"): ("correct", True),  # numbered 7, named scaled_allgather
        ("pkb_grouped_linear", "cuda"): ("wrong_output", True),  # float64 for float32: PKB does not look
        ("pkb_grouped_linear", "triton"): ("correct", True),  # a module and a group among its inputs
        ("pkb_tp_rms_norm", "cuda"): ("wrong_output", True),  # rms_norm: writes into its input
        ("pkb_fsdp_adamw_sharded", "cuda"): ("invalid_sample", None),
    }, df[["problem_id", "status", "message"]].to_string()
    # torch extensions (load_inline): built in the compile stage when the call's arguments are known
    # at import, so the rank only imports them; a name known only at run time is built on the rank
    ext = df[df["model"] == "ext-model"].set_index("problem_id")
    assert dict(ext["status"]) == {"pkb_allreduce": "correct", "pkb_scaled_allgather": "correct",
                                   "pkb_grouped_linear": "compile_error"}, ext["message"].to_string()
    assert "no_such_method" in ext.loc["pkb_grouped_linear", "message"]  # the compiler's own words
    assert ext.loc["pkb_allreduce", "rank_builds"] == 0 and ext.loc["pkb_allreduce", "compile_seconds"] > 0
    assert ext.loc["pkb_scaled_allgather", "rank_builds"] == 1
    by_problem = mine.set_index(["problem_id", "backend"])
    assert "dtype torch.float64, expected torch.float32" in by_problem.loc[("pkb_grouped_linear", "cuda"), "message"]
    assert "input" in by_problem.loc[("pkb_tp_rms_norm", "cuda"), "message"]
    correct = df[df["status"] == "correct"]  # no bound is published for PKB: one reference call, traced
    assert (correct["sol_fraction"] > 0).all() and (correct["sol_source"] == "traced").all()
    table = verdicts(df)
    assert set(table.loc[table["sample"] != "(all)", "sample"]) == {"pkb_grouped_linear/0", "pkb_tp_rms_norm/0"}
    assert "PKB's verdict beside pkb_ray's" in (run_dir / "report.md").read_text()


def test_the_problem_check_probes_pkb_problems_at_a_world_size(problems):
    from pkb_ray.problems.check import check

    # no oracle to compare with: the builder and the reference run on 3 gloo ranks, reproducibly
    assert check(problems, sorted(problems), 3, presets=("small",), seeds=(0,), dtype="float32") == {}
