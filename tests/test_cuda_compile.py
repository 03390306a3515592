"""The CUDA path on a machine without a GPU: real nvcc builds, the cache, the compile stage."""

from pathlib import Path

import pytest
import ray

from conftest import HOSTILE, REPO
from pkb_ray.cuda import ENV_ARCH, ENV_CACHE, BuildSpec, CudaBuildError, build, find_sources, load_cuda
from pkb_ray.pipeline.wiring import run_pipeline, sample_stream
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.names import Status

CUDA = HOSTILE / "cuda"
PING = (CUDA / "host_ping.py").read_text()
BROKEN = (REPO / "samples/replay/all_reduce/08_cuda_nvcc_error.py").read_text()


def test_sources_are_found_without_running_the_module():
    src = 'A = "x"\nB = A + "y"\nlib = load_cuda(B, flags=("-lineinfo",))\nm.load_cuda(source="z")\nload_cuda(f"{n}")\n'
    assert find_sources(src) == [("xy", ("-lineinfo",)), ("z", ())]  # the f-string is left to the rank
    assert [s for s, _ in find_sources(PING)] == [find_sources(PING)[0][0]] and "ping" in find_sources(PING)[0][0]


def test_a_good_source_builds_once_and_loads_without_a_gpu(tmp_path, monkeypatch):
    source = find_sources(PING)[0][0]
    spec = BuildSpec(source, "sm_90a")
    lib = build(spec, tmp_path)
    built_at = lib.stat().st_mtime_ns
    assert build(spec, tmp_path) == lib and lib.stat().st_mtime_ns == built_at  # a hit: not rebuilt
    assert BuildSpec(source, "sm_80").key() != spec.key() != BuildSpec(source, "sm_90a", ("-G",)).key()
    monkeypatch.setenv(ENV_CACHE, str(tmp_path))
    monkeypatch.setenv(ENV_ARCH, "sm_90a")
    assert load_cuda(source, functions={"ping": []}).ping() == 42
    assert [p.name for p in tmp_path.iterdir()] == [spec.key()]  # no second build, no leftovers


def test_a_broken_source_gives_the_compilers_message(tmp_path):
    source = find_sources(BROKEN)[0][0]
    with pytest.raises(CudaBuildError) as err:
        build(BuildSpec(source), tmp_path)
    assert "undeclared_value" in str(err.value) and "kernel.cu" in str(err.value)
    assert str(tmp_path) not in str(err.value)  # no temporary paths in what users read
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(CudaBuildError, match="did not finish within"):
        build(BuildSpec(source + "\n// other"), tmp_path, timeout_s=0.001)


@pytest.fixture(scope="module")
def cluster(shared_ray):
    with shared_ray.joined():
        yield


def test_the_compile_stage_builds_each_source_once_and_reports_errors(cluster, tmp_path):
    cfg = SweepConfig.model_validate({"cache_dir": str(tmp_path), "hardware": {"arch": "sm_90a"},
                                      "eval": {"compile_workers": 2}})
    rows = [{"problem_id": "all_reduce", "model": "m", "sample_index": i, "backend": "cuda", "source": src}
            for i, src in enumerate([PING, BROKEN, PING])]
    items = list(sample_stream(rows, cfg, None, set()))  # the run's own stream, up to the gangs
    tasks = {i.task.sample.sample_index: i.task for i in items if i.task}
    errors = {i.result.sample_index: i.result for i in items if i.result}
    assert sorted(tasks) == [0, 2] and errors[1].status == Status.COMPILE_ERROR
    assert "undeclared_value" in errors[1].message
    assert (errors[1].hardware, errors[1].size, errors[1].world_size) == (cfg.hardware.name, "small", 2)
    keys = tasks[0].sample.metadata["cuda_builds"]
    assert tasks[2].sample.metadata["cuda_builds"] == keys and tasks[0].where.layout.world_size == 2
    assert [p.name for p in (tmp_path / "cuda").iterdir()] == [keys]  # one build (the broken one leaves nothing)
    [again] = list(sample_stream(rows[:1], cfg, None, set()))
    assert again.task.sample.metadata["cuda_builds"] == keys  # from the cache


def test_pipeline_turns_nvcc_errors_into_results_and_ranks_only_load(cluster, tmp_path, problems):
    cfg = SweepConfig.model_validate({"cache_dir": str(tmp_path), "hardware": {"arch": "sm_90a"},
                                      "eval": {"trials": 2, "rounds": 5, "max_round_calls": 1, "prewarm": 0}})
    rows = [{"problem_id": "all_reduce", "model": "m", "sample_index": i, "backend": "cuda", "source": src}
            for i, src in enumerate([PING, BROKEN])]
    results = {r.sample_index: r for r in run_pipeline(rows, cfg, problems, tmp_path / "results", resume=False)}
    assert results[1].status == Status.COMPILE_ERROR and "undeclared_value" in results[1].message
    # the rank imported the candidate: load_cuda found the compile stage's build and the module ran
    assert results[0].status == Status.CORRECT, results[0].message
    assert len(list((tmp_path / "cuda").iterdir())) == 1  # one build (the broken one leaves nothing)


def test_every_expert_kernel_builds_here_with_the_shipped_device_header(tmp_path):
    kernels = sorted((REPO / "kernels").rglob("*.py"))
    sources = [(k, s, f) for k in kernels for s, f in find_sources(k.read_text())]
    assert len(sources) >= 5  # all-reduce x2, all-gather, reduce-scatter, all-to-all
    for path, source, flags in sources:
        lib = build(BuildSpec(source, "sm_90a", flags), tmp_path / "cache")  # raises with nvcc's message
        assert lib.exists(), path
    # the header is part of every build's key: a candidate including it is rebuilt when it changes
    assert any("pkb_ray/peer.cuh" in s for _, s, _ in sources)
    assert "-I" + str(REPO / "pkb_ray" / "include") in BuildSpec("x").command(Path("a.cu"), Path("a.so"))


def test_compile_actors_leave_the_cpus_to_the_stream_that_feeds_them(cluster, tmp_path):
    """As many compile actors as the cluster has CPUs (the default on a 2-core machine: 2) took every
    CPU while they lived, and they live until the stream ends: the stream's own tasks could then never
    run, and a sweep with a few CUDA samples stopped for good (`benchmarks throughput` on 2 cores).
    With every actor up and building, a task that needs a CPU still runs."""
    from pkb_ray.pipeline.compile import build_settings
    from pkb_ray.pipeline.wiring import CompilePool, Prepared
    from pkb_ray.spec.placement import Layout
    from pkb_ray.spec.schema import EvalTask, Sample, Where

    cpus = int(ray.cluster_resources()["CPU"])
    pool = CompilePool(build_settings("sm_90a", tmp_path, 300), None, size=cpus)
    items = [Prepared(task=EvalTask(Sample(problem_id="all_reduce", model="m", sample_index=i, backend="cuda",
                                           source=BROKEN.replace("undeclared_value", f"undeclared_value_{i}")),
                                    Where(Layout(1, 2)))) for i in range(cpus)]
    built = pool.built(iter(items))
    first = next(built)  # every item was handed to an actor of its own before this one came back
    assert len(pool._actors) == cpus
    assert ray.get(ray.remote(num_cpus=1)(lambda: "ran").remote(), timeout=120) == "ran"
    rest = list(built)
    assert [p.result.status for p in [first, *rest]] == [Status.COMPILE_ERROR] * cpus
