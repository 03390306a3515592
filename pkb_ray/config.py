"""The run's configuration as pydantic models: what Hydra composes is validated here, at start.

A wrong key or value fails before any work with a message naming the key
(``eval.trials: Input should be greater than 0``). Each group mirrors a folder of ``conf/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from pkb_ray import formats
from pkb_ray.placement import Layout
from pkb_ray.names import BACKENDS, TIMING_MODES, Backend, TimingMode

# Dict-valued keys are null in conf/ so that a command-line override replaces them whole (Hydra
# refuses to add keys to a dict that the config already holds, even an empty one).
NULL_IS_EMPTY = BeforeValidator(lambda value: {} if value is None else value)


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Strict):
    """Where samples come from: ``replay`` reads a sample set from disk; ``openai`` asks any
    OpenAI-compatible chat-completions endpoint (hosted, or a local vLLM / SGLang server)."""

    name: str = "replay"
    provider: Literal["replay", "openai"] = "replay"
    samples: str | None = Field("samples/replay", description="replay: a replay folder, a .jsonl/.parquet file, "
                                                              "or a folder of them")
    base_url: str | None = Field(None, description="openai: the endpoint, e.g. https://api.openai.com/v1")
    model_id: str | None = Field(None, description="openai: the model name the endpoint serves")
    api_key_env: str | None = Field("OPENAI_API_KEY", description="the environment variable holding the API key "
                                                                  "(the key itself is never in a config); None: none")
    samples_per_problem: int = Field(4, ge=1, description="K samples per problem (and backend)")
    temperature: float = Field(0.7, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int = Field(8192, ge=1)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens", description="the request field for max_tokens: OpenAI's reasoning models take only "
                                  "max_completion_tokens")
    seed: int | None = Field(0, description="request seed (sample i of a problem asks with seed + i)")
    concurrency: int = Field(8, ge=1, description="requests in flight at once")
    requests_per_second: float = Field(2.0, gt=0)
    max_retries: int = Field(6, ge=0, description="retries of a request on 429, 5xx, timeouts, dropped connections")
    timeout_s: float = Field(600.0, gt=0, description="limit for one request")
    refine_rounds: int = Field(0, ge=0, description="rounds of feedback: failed or slow samples go back to the model")
    refine_below_speedup: float = Field(1.0, gt=0, description="a correct sample slower than this is refined too")

    @model_validator(mode="after")
    def _endpoint(self) -> "ModelConfig":
        if self.provider == "openai":
            missing = [k for k in ("base_url", "model_id") if not getattr(self, k)]
            if missing:
                raise ValueError(f"provider 'openai' needs {' and '.join(missing)}")
        elif not self.samples:
            raise ValueError("provider 'replay' needs samples (a folder or file of samples)")
        return self


class ProblemsConfig(_Strict):
    name: str = "all"
    format: str = Field("native", description="native: problem files of pkb_ray's format (problems_dir); or a "
                        "source of pkb_ray.formats, e.g. pkb: every reference of the ParallelKernelBench checkout "
                        "at pkb.root, as problems pkb_<name>")
    ids: list[str] | None = Field(None, description="problem ids to run; None = all")
    categories: list[str] | None = None

    @field_validator("format")
    @classmethod
    def _known_source(cls, v: str) -> str:
        if v not in formats.names():
            raise ValueError(f"unknown problem source {v!r}; known: {', '.join(formats.names())}")
        return v


class BackendConfig(_Strict):
    """Which kinds of solution a run evaluates (and, with generation, asks for)."""

    name: str = "all"
    backends: list[Literal[BACKENDS]] | None = Field(
        None, description="None: every backend; else only samples written for these")


ALL_PROBLEMS = "ALL"  # eval.tolerances key for every problem (ids are lower case)


class ToleranceOverride(_Strict):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


class EvalConfig(_Strict):
    trials: int = Field(3, ge=1, description="correctness trials, each on fresh random inputs")
    timing_sets: int = Field(3, ge=1, description="base input sets that every timed call's own inputs are made "
                                                  "from (pkb_ray.timing); also the calibration region's calls")
    warmup: int = Field(3, ge=0, description="untimed calls of each side before timing")
    rounds: int = Field(20, ge=1, description="timed rounds per side (reference and candidate interleaved)")
    round_us: float = Field(2000.0, gt=0, description="target length of one round; sets its back-to-back calls")
    max_round_calls: int = Field(200, ge=1, description="at most this many calls in one round")
    timeout_s: float = Field(60.0, gt=0, description="the deadline of one sample, from its trials through its "
                             "last timed region: every wait for it ends by then (pkb_ray.deadlines)")
    startup_timeout_s: float = Field(120.0, gt=0, description="limit for rank processes to join their group")
    compile_timeout_s: float = Field(300.0, gt=0, description="limit for nvcc on one CUDA source")
    inline_build_timeout_s: float = Field(600.0, gt=0, description="extra time for the trial step of samples "
                                          "that build their extensions on the rank (load_inline: PKB solutions)")
    compile_workers: int | None = Field(None, ge=1, description="CPU compiler actors; None: one per CPU, at most 16")
    size: str | dict[str, int] = Field("small", description="a size preset of every problem (small, default, "
                                                            "large), or knob values, e.g. {numel: 65536}")
    sizes: list[str | dict[str, int]] | None = Field(
        None, description="a size sweep: each sample evaluated at each of these sizes (preset names, knob values, "
                          "or 'ladder': the problem's size ladder); None: at 'size' only")
    timing_mode: Literal[TIMING_MODES] = Field(
        TimingMode.EAGER, description="eager: each timed call issued from Python; graph: a region's k calls "
                                      "captured once into a CUDA graph and replayed (eager where a side cannot be "
                                      "captured, with the reason in graph_error); both: both, the graph's times "
                                      "first where it captured")
    dtype: str | None = Field(None, description="None: each problem's first dtype")
    seed: int = Field(0, ge=0)
    isolation: Literal["sandbox", "none"] = Field(
        "sandbox", description="sandbox: each sample's ranks share a bubblewrap sandbox (no credentials, read-only "
                               "files, private scratch, own PID namespace, limits); none: plain processes, for "
                               "debugging only. The run fails at start when the level cannot be had")
    spot_checks: int = Field(8, ge=1, description="timed regions per side whose output (one call, picked at random "
                                                  "after the region) a clean rank set recomputes and compares")
    prewarm: int = Field(1, ge=0, le=8, description="rank sets started ahead while samples run (0: none)")
    quiet_timing: bool = Field(True, description="never start a rank set while a sample is timed; prewarmed sets "
                                                 "then start in batches (see Harness.prewarm)")
    tolerances: Annotated[dict[str, dict[str, ToleranceOverride]], NULL_IS_EMPTY] = Field(
        default_factory=dict, description="problem id (or ALL) -> dtype -> {atol, rtol}: replaces the "
                                          "problem's own tolerance, e.g. {all_reduce: {bfloat16: {atol: 0.05, rtol: 0.05}}}")

    @field_validator("sizes", mode="before")
    @classmethod
    def _one_size_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, dict)) else value

    def size_specs(self) -> list[str | dict[str, int]]:
        """The sizes each sample is evaluated at."""
        return list(self.sizes) if self.sizes else [self.size]

    def tolerance_override(self, problem_id: str, dtype: str) -> ToleranceOverride | None:
        return self.tolerances.get(problem_id, {}).get(dtype) or self.tolerances.get(ALL_PROBLEMS, {}).get(dtype)


class HardwareConfig(_Strict):
    """The machine a run targets, and the bandwidths its speed-of-light bounds use."""

    name: str = "cpu_gloo"
    device: Literal["cpu", "cuda"] = "cpu"
    world_sizes: list[int] = Field([2], description="evaluate every sample at each of these (that its problem "
                                                   "supports), on one node; empty: the spread layouts only")
    gpus_per_node: int = Field(2, ge=1, description="GPUs per node (logical ones on a CPU machine)")
    nodes: int = Field(1, ge=1)
    arch: str | None = None
    link_gbps: float = Field(gt=0, default=1.0, description="per-GPU interconnect bandwidth, GB/s, one way")
    link_latency_us: float = Field(0.0, ge=0, description="one dependent step of communication between GPUs of a "
                                   "node (a write and its flag seen by the peer), microseconds; 0: not measured")
    hbm_gbps: float = Field(gt=0, default=10.0)
    tflops: float = Field(gt=0, default=0.1, description="peak dense compute, TFLOPS, for dtypes not in tflops_by_dtype")
    tflops_by_dtype: Annotated[dict[Literal["float64", "float32", "float16", "bfloat16"],
                                    Annotated[float, Field(gt=0)]], NULL_IS_EMPTY] = Field(
        default_factory=dict, description="peak dense compute per problem dtype, TFLOPS: the fastest way to do that "
                                          "dtype's math at its accuracy (e.g. float32 on Hopper: 3xTF32)")
    nvlink_multicast: bool = Field(True, description="false: force NVLink multicast (NVLS) off in every rank, and "
                                                     "refuse samples that would create multicast objects "
                                                     "(unsupported_hardware); true: leave it to the environment")
    spread: list[str] = Field(default_factory=list,
                              description="gang layouts over several nodes, NODESxGPUS_PER_NODE (e.g. 2x4): every "
                                          "sample is evaluated at each of them too, for inter-node baselines")
    network_gbps: float = Field(gt=0, default=50.0, description="per-GPU bandwidth between nodes, GB/s, one way "
                                                                "(400 Gb/s NIC per GPU: 50)")
    network_latency_us: float = Field(0.0, ge=0, description="one dependent step between nodes, microseconds; "
                                      "0: not measured")
    nccl_env: Annotated[dict[str, str], NULL_IS_EMPTY] = Field(
        default_factory=dict, description="environment of every rank, e.g. NCCL_SOCKET_IFNAME, NCCL_IB_HCA")
    spread_nccl_env: Annotated[dict[str, str], NULL_IS_EMPTY] = Field(
        default_factory=dict, description="added for ranks of gangs spread over nodes only, e.g. NCCL_P2P_DISABLE=1 "
                                          "and NCCL_SHM_DISABLE=1 to make fake nodes on one machine talk over sockets")

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    @field_validator("world_sizes", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, int) else value

    @model_validator(mode="after")
    def _fits(self) -> "HardwareConfig":
        if not self.world_sizes and not self.spread:
            raise ValueError("world_sizes is empty and so is spread: no layout to evaluate on")
        if len(set(self.world_sizes)) != len(self.world_sizes) or min(self.world_sizes, default=1) < 1:
            raise ValueError(f"world_sizes {self.world_sizes} must be distinct positive integers")
        too_big = [w for w in self.world_sizes if w > self.gpus_per_node]
        if too_big:  # a gang of world_sizes lives on one node; layouts over nodes go in spread
            raise ValueError(f"world_sizes {too_big} exceed gpus_per_node {self.gpus_per_node}")
        for i, text in enumerate(self.spread):
            try:
                lay = Layout.of(text)
            except ValueError as exc:
                raise ValueError(f"spread.{i}: {exc}") from None
            if lay.nodes < 2:
                raise ValueError(f"spread.{i}: {text} is on one node: put its world size in world_sizes")
            if lay.nodes > self.nodes or lay.per_node > self.gpus_per_node:
                raise ValueError(f"spread.{i}: {text} needs {lay.nodes} nodes of {lay.per_node} GPUs; the profile "
                                 f"has {self.nodes} of {self.gpus_per_node} (hardware.nodes, gpus_per_node)")
        return self

    def peak_tflops(self, dtype: str) -> float:
        """The compute bound of the speed of light for a problem run in ``dtype``."""
        return self.tflops_by_dtype.get(dtype, self.tflops)

    @property
    def layouts(self) -> list[Layout]:
        """Every gang layout of a run: each world size on one node, then each spread layout."""
        return [Layout(1, w) for w in self.world_sizes] + self.spread_layouts

    @property
    def spread_layouts(self) -> list[Layout]:
        """The layouts of ``spread``, in order."""
        return [Layout.of(t) for t in self.spread]


class RayConfig(_Strict):
    address: str | None = Field(None, description="None: start a local Ray; 'auto' or host:port to join one")
    num_cpus: int | None = Field(None, ge=1, description="a local Ray's CPUs; None: all of the machine's")
    num_gpus: int | None = Field(None, ge=0, description="a local Ray's GPUs; None: detected (CPU runs: logical "
                                                         "GPUs, hardware.gpus_per_node x nodes)")
    resources: Annotated[dict[str, float], NULL_IS_EMPTY] = Field(default_factory=dict,
                                                              description="custom resources of a local Ray")
    include_dashboard: bool = False


class WandbConfig(_Strict):
    mode: Literal["offline", "online", "disabled"] = "offline"
    project: str = "pkb_ray"
    entity: str | None = None
    group: str | None = Field(None, description="None: the sweep's folder name under -m, so a sweep's runs group "
                                                "together; no group for a single run")
    tags: list[str] = Field(default_factory=list)


class PkbConfig(_Strict):
    """ParallelKernelBench as a source of problems (problems.format=pkb) and samples (its solution folders)."""

    root: str | None = Field(None, description="a checkout of togethercomputer/ParallelKernelBench")
    faithful_inputs: bool = Field(False, description="true: PKB's inputs exactly (trial = seed); false: problems "
                                                     "whose builder gives constant inputs get random ones")
    shim_dir: str = Field("~/.cache/pkb_ray_pkb", description="where the generated problem files go (rank "
                                                              "processes must read them: not under cache_dir)")


class SweepConfig(_Strict):
    model: ModelConfig = ModelConfig()
    problems: ProblemsConfig = ProblemsConfig()
    backend: BackendConfig = BackendConfig()
    eval: EvalConfig = EvalConfig()
    hardware: HardwareConfig = HardwareConfig()
    ray: RayConfig = RayConfig()
    wandb: WandbConfig = WandbConfig()
    pkb: PkbConfig = PkbConfig()
    problems_dir: str | None = Field(None, description="None: the problems/ folder of this checkout")
    output_dir: str = "."
    results_dir: str | None = Field(None, description="None: <output_dir>/results. Name a folder to resume a "
                                                      "sweep there: samples with a final result are skipped")
    generated_dir: str | None = Field(None, description="None: <output_dir>/generated. Generated samples (Parquet); "
                                                        "name a folder to reuse them: nothing is generated twice")
    cache_dir: str = Field("~/.cache/pkb_ray", description="reference outputs, reused across runs")
    baselines_dir: str = Field("baselines", description="reference timings per hardware profile "
                                                        "(python -m pkb_ray.baselines writes <name>.json there)")

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir).expanduser()

    @model_validator(mode="after")
    def _generated_backends(self) -> "SweepConfig":
        if self.model.provider != "replay" and Backend.PARALLELKITTENS in (self.backend.backends or []):
            raise ValueError("backend.backends: parallelkittens samples are read from sample folders "
                             "(model.samples); a model is asked for torch, cuda or triton")
        return self


def validate_config(raw: dict[str, Any], source: str = "config") -> SweepConfig:
    """Validate a composed config; raise ConfigError naming the first bad key."""
    try:
        return SweepConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{source}: {key}: {err['msg']}") from None
