"""Config composition with Hydra, overrides, and validation errors that name the key."""

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import REPO
from pkb_ray.pipeline.selection import check_against_problems
from pkb_ray.spec.config import ConfigError, validate_config


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["output_dir=/tmp/x", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)


def test_default_composes_and_validates():
    cfg = validate_config(composed())
    assert cfg.model.name == "replay" and cfg.hardware.backend == "gloo"
    assert cfg.eval.rounds == 100 and cfg.wandb.mode == "offline"


def test_group_choice_and_key_overrides():
    cfg = validate_config(composed("hardware=h200_2", "eval=gpu", "eval.trials=7", "problems=smoke"))
    assert cfg.hardware.backend == "nccl" and cfg.hardware.link_gbps == 450.0
    assert cfg.eval.trials == 7 and cfg.problems.ids == ["all_reduce", "all_gather"]


def test_a_run_of_spread_layouts_only():
    # e.g. python -m benchmarks nodes: fake nodes of one GPU each hold the 2x1 gang, not a W=2 one
    cfg = validate_config(composed("hardware.world_sizes=[]", "hardware.nodes=2", "hardware.spread=[2x1]"))
    assert [str(lay) for lay in cfg.hardware.layouts] == ["2x1"]


@pytest.mark.parametrize(
    "override, key",
    [
        ("eval.trials=0", "eval.trials"),
        ("eval.timeout_s=-1", "eval.timeout_s"),
        ("hardware.device=tpu", "hardware.device"),
        ("wandb.mode=sometimes", "wandb.mode"),
        ("hardware.world_sizes=[16]", "hardware"),
        ("hardware.world_sizes=[2,2]", "hardware"),
        ("hardware.world_sizes=[]", "hardware"),  # and no spread: no layout at all
        ("+eval.colour=red", "eval.colour"),
        ("backend.backends=[fortran]", "backend.backends.0"),
        ("eval.tolerances={all_reduce:{float32:{atol:-1,rtol:0}}}", "eval.tolerances.all_reduce.float32.atol"),
        ("ray.num_gpus=-2", "ray.num_gpus"),
        ("model.provider=openai", "model"),  # an endpoint needs base_url and model_id
        ("model=vllm_local model.concurrency=0", "model.concurrency"),
        ("hardware=h200_2 +hardware.tflops_by_dtype.int8=1979", "hardware.tflops_by_dtype.int8"),
        ("hardware=h200_2 hardware.tflops_by_dtype.float32=0", "hardware.tflops_by_dtype.float32"),
        ("eval.isolation=chroot", "eval.isolation"),
        ("eval.timing_mode=fast", "eval.timing_mode"),
        ("eval.checked_calls=0", "eval.checked_calls"),
    ],
)
def test_bad_values_fail_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        validate_config(composed(*override.split()))
    assert f": {key}" in str(err.value)


@pytest.mark.parametrize(
    "override, key",
    [("problems.ids=[all_reduce,nope]", "problems.ids"), ("eval.size=huge", "eval.size"),
     ("eval.dtype=int32", "eval.dtype"), ("problems.categories=[astrology]", "problems.categories"),
     ("eval.size={rows:3}", "eval.size"),
     ("eval.tolerances={nope:{float32:{atol:1,rtol:0}}}", "eval.tolerances.nope"),
     ("eval.tolerances={all_reduce:{int8:{atol:1,rtol:0}}}", "eval.tolerances.all_reduce.int8")],
)
def test_config_that_contradicts_the_problems_fails_at_start(problems, override, key):
    cfg = validate_config(composed(override))
    with pytest.raises(ConfigError, match=key):
        check_against_problems(cfg, problems)


def test_size_may_be_explicit_knob_values(problems):
    cfg = validate_config(composed("eval.size={numel:65536}", "problems.ids=[all_gather,all_reduce]"))
    assert cfg.eval.size == {"numel": 65536}
    assert check_against_problems(cfg, problems)
    assert problems["all_gather"].size(cfg.eval.size) == ("numel=65536", {"numel": 65536})


def test_every_group_of_the_sweep_matrix_composes():
    for override in ("backend=cuda", "backend=triton", "backend=torch", "backend=all", "hardware=h100_8",
                     "problems=collectives", "ray=cluster", "wandb=disabled", "wandb=online", "eval=gpu",
                     "model=kernels", "model=gpt_5", "model=claude_sonnet", "model=deepseek", "model=gemini",
                     "model=vllm_local", "problems=llm", "problems=science", "problems=moe", "hardware=h200_8"):
        assert validate_config(composed(override))
    cfg = validate_config(composed("backend=cuda", "ray.resources={accel:2}", "wandb.tags=[nightly]",
                                   "eval.tolerances={ALL:{bfloat16:{atol:0.1,rtol:0.1}}}"))
    assert cfg.backend.backends == ["cuda"] and cfg.ray.resources == {"accel": 2.0} and cfg.wandb.tags == ["nightly"]
    assert cfg.eval.tolerance_override("all_gather", "bfloat16").atol == 0.1
    assert cfg.eval.tolerance_override("all_gather", "float32") is None


def test_backend_choice_selects_samples(problems):
    from pkb_ray.generate.samples import read_samples
    from pkb_ray.pipeline.selection import select_rows

    rows = read_samples(REPO / "samples" / "replay") + read_samples(REPO / "kernels", model="kernels")
    picked = {b: select_rows(rows, validate_config(composed(f"backend={b}")), problems)
              for b in ("all", "torch", "cuda", "triton", "parallelkittens")}
    assert len(picked["all"]) == len(rows)
    assert {r["backend"] for r in picked["cuda"]} == {"cuda"} and len(picked["cuda"]) >= 5
    assert {r["backend"] for r in picked["triton"]} == {"triton"}
    assert {r["backend"] for r in picked["parallelkittens"]} == {"parallelkittens"}
    assert sum(len(picked[b]) for b in ("torch", "cuda", "triton", "parallelkittens")) == len(rows)


def test_problem_choice_selects_samples_and_keeps_rows_of_unknown_problems(problems):
    from pkb_ray.generate.samples import read_samples
    from pkb_ray.pipeline.selection import select_rows

    rows = read_samples(REPO / "samples" / "replay") + [{"problem_id": "no_such_problem", "source": ""}]
    picked = select_rows(rows, validate_config(composed("problems.ids=[broadcast]")), problems)
    assert sorted(r["problem_id"] for r in picked) == ["broadcast", "broadcast", "no_such_problem"]


def test_speed_of_light_bounds_flops_by_the_peak_of_the_problem_dtype(problems):
    from pkb_ray.problem import DTYPES, sol_time_us

    hw = validate_config(composed("hardware=h200_2")).hardware
    p, knobs = problems["gemm_allreduce"], problems["gemm_allreduce"].meta.sizes["default"]
    flops = {d: p.speed_of_light(knobs, 2, DTYPES[d]).flops for d in ("float32", "bfloat16")}
    # a float32 GEMM of this size is compute-bound at fp32's peak (165 TFLOPS), not bf16 tensor cores'
    assert sol_time_us(p, knobs, 2, "float32", hw) == pytest.approx(flops["float32"] / 165e12 * 1e6)
    assert sol_time_us(p, knobs, 2, "bfloat16", hw) < sol_time_us(p, knobs, 2, "float32", hw) / 3
    flat = hw.model_copy(update={"tflops_by_dtype": {}})  # a profile without the table: `tflops` for every dtype
    assert sol_time_us(p, knobs, 2, "float32", flat) < sol_time_us(p, knobs, 2, "float32", hw) / 3


def test_speed_of_light_adds_the_link_latency_once_per_dependent_step(problems):
    from pkb_ray.problem import sol_time_us

    hw = validate_config(composed("hardware=h200_2")).hardware
    slow = hw.model_copy(update={"link_latency_us": 2.0, "network_latency_us": 5.0})

    def added(pid, world=2, nodes=1):
        p = problems[pid]
        knobs = p.meta.sizes["default"]
        return sol_time_us(p, knobs, world, p.meta.dtypes[0], slow, nodes=nodes) - \
            sol_time_us(p, knobs, world, p.meta.dtypes[0], hw, nodes=nodes)

    assert added("all_reduce") == pytest.approx(2.0)  # one exchange
    assert added("heat_equation_halo_1d") == pytest.approx(2.0)  # one wide halo, however many time steps
    assert added("sample_sort") == pytest.approx(4.0) and added("moe_ep_forward_many_experts") == pytest.approx(4.0)
    assert added("all_reduce", world=4, nodes=2) == pytest.approx(5.0)  # a step waits for the slower link
    assert sol_time_us(problems["all_reduce"], {"numel": 4}, 1, "float32", slow) < 1.0  # alone: no step


def test_an_isolation_level_that_cannot_be_had_fails_at_start_naming_the_key(monkeypatch):
    from pkb_ray.isolation import sandbox
    from pkb_ray.pipeline.cluster import announce_isolation

    assert announce_isolation("sandbox").level is sandbox.Isolation.SANDBOX
    monkeypatch.setattr(sandbox, "_bwrap_candidates", lambda: ["/nonexistent/bwrap"])
    sandbox.probe.cache_clear()
    try:
        with pytest.raises(ConfigError) as err:
            announce_isolation("sandbox")
        assert "eval.isolation" in str(err.value) and "/nonexistent/bwrap" in str(err.value)
    finally:
        sandbox.probe.cache_clear()


def test_a_model_is_never_asked_for_parallelkittens():
    raw = {"model": {"provider": "openai", "name": "m", "base_url": "http://127.0.0.1:9/v1", "model_id": "m"},
           "backend": {"backends": ["cuda", "parallelkittens"]}}
    with pytest.raises(ConfigError, match="backend.backends: parallelkittens samples are read from sample folders"):
        validate_config(raw)
    assert validate_config({"backend": {"backends": ["parallelkittens"]}}).backend.backends == ["parallelkittens"]


def test_the_eval_profile_follows_the_hardware_device_unless_chosen():
    from pkb_ray.spec.compose import compose_config, config_groups
    from pkb_ray.spec.config import EVAL_PROFILES

    for name in config_groups()["hardware"]:
        cfg = compose_config([f"hardware={name}"])
        chosen = compose_config([f"hardware={name}", f"eval={EVAL_PROFILES[cfg.hardware.device]}"])
        assert cfg.eval == chosen.eval, name
    gpu = compose_config(["hardware=h200_2", "eval.trials=7"])  # a key override keeps the followed profile
    assert (gpu.eval.trials, gpu.eval.max_round_calls, gpu.eval.size) == (7, 500, "default")
    assert compose_config([]).eval.max_round_calls == 1
    assert compose_config(["eval=gpu"]).eval.max_round_calls == 500  # eval chosen over the default hardware


@pytest.mark.parametrize("hardware, profile", [("h200_2", "cpu"), ("cpu_gloo", "gpu"), ("h100_8", "cpu")])
def test_an_eval_profile_chosen_against_the_chosen_hardware_fails_naming_both(hardware, profile):
    from pkb_ray.spec.compose import compose_config

    with pytest.raises(ConfigError) as err:
        compose_config([f"hardware={hardware}", f"eval={profile}"])
    message = str(err.value)
    assert message.startswith("config: hardware, eval:")
    assert f"conf/hardware/{hardware}.yaml" in message and f"conf/eval/{profile}.yaml" in message
    assert compose_config([f"hardware={hardware}", f"eval={'cpu' if profile == 'gpu' else 'gpu'}"])


def test_a_hardware_profile_whose_defaults_leave_eval_behind_is_named():
    raw = {"hardware": {"name": "mine", "device": "cuda"}}
    with pytest.raises(ConfigError, match=r"add '- override /eval@_global_.eval: gpu' to the defaults of "
                                          r"conf/hardware/mine.yaml"):
        validate_config(raw, choices={"hardware": "mine", "eval": "cpu"}, explicit={"hardware"})
    # a profile of neither device (a user's own) is not judged
    assert validate_config(raw, choices={"hardware": "mine", "eval": "h200_tuned"}, explicit={"hardware", "eval"})


def test_every_mistake_of_a_command_line_is_reported_at_once_with_close_matches():
    from pkb_ray.spec.compose import compose_config, precheck

    args = ["eval.timout_s=5", "eval.trials=0", "hardware=h2000"]
    with pytest.raises(ConfigError) as err:
        compose_config(args)
    head, *lines = str(err.value).splitlines()
    assert head == "config: 3 errors" and len(lines) == 3
    assert lines[0].startswith("  eval.timout_s: no such key; did you mean eval.timeout_s")
    assert lines[1].startswith("  hardware=h2000: no conf/hardware/h2000.yaml; did you mean hardware=h200_")
    assert lines[2].startswith("  eval.trials (conf/eval/cpu.yaml): Input should be greater than or equal to 1")
    assert precheck(args) == str(err.value)  # what a Hydra entry point prints before Hydra stops at one
    assert precheck(["-m", "hardware=h200_2,h2000"]).startswith("config: hardware=h2000: no conf/hardware/")
    assert precheck(["hardware=h200_2", "eval.trials=3"]) is None
    assert precheck(["--cfg", "job", "hardware=h2000"]) is None  # other flags: Hydra's own


def test_unknown_keys_that_reach_validation_get_close_matches():
    with pytest.raises(ConfigError) as err:
        validate_config({"eval": {"timout_s": 1, "trials": 0}, "hardwre": {}},
                        choices={"eval": "cpu", "hardware": "cpu_gloo"})
    message = str(err.value)
    assert "eval.timout_s (conf/eval/cpu.yaml): Extra inputs are not permitted; did you mean eval.timeout_s" in message
    assert "hardwre (conf/config.yaml): Extra inputs are not permitted; did you mean hardware?" in message
    assert "eval.trials (conf/eval/cpu.yaml)" in message and message.startswith("config: 3 errors")
