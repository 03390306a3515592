"""The run's configuration as pydantic models: what Hydra composes is validated here, at start.

A wrong key or value fails before any work with one message naming every bad key and its file
(``eval.trials (conf/eval/cpu.yaml): Input should be greater than 0``), unknown keys with close
matches. Each group mirrors a folder of ``conf/``.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model, field_validator,
                      model_validator)

from pkb_ray.spec import formats
from pkb_ray.spec.names import BACKENDS, TIMING_MODES, Backend, TimingMode
from pkb_ray.spec.placement import Layout

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
    limit_per_problem: int | None = Field(None, ge=1, description="evaluate (and ask for) at most N samples per "
                                          "problem, the lowest sample indices: a partial run, so marked in its "
                                          "summary; None: all")
    temperature: float = Field(0.7, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int = Field(8192, ge=1)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens", description="the request field for max_tokens: OpenAI's reasoning models take only "
                                  "max_completion_tokens")
    seed: int | None = Field(0, description="request seed (sample i of a problem asks with seed + i)")
    concurrency: int = Field(8, ge=1, description="requests in flight at once")
    requests_per_second: float = Field(2.0, gt=0)
    max_retries: int = Field(6, ge=0, description="retries of a request by the openai client: 429, 408, 409, 5xx, "
                             "timeouts, dropped connections; backoff 0.5 s doubling to 8 s, or Retry-After")
    timeout_s: float = Field(600.0, gt=0, description="limit for one request")
    refine_rounds: int = Field(0, ge=0, description="rounds of feedback: failed or slow samples go back to the model")
    refine_below_speedup: float = Field(1.0, gt=0, description="a correct sample slower than this is refined too")
    usd_per_mtok_in: float | None = Field(None, ge=0, description="price per million prompt tokens: generation's "
                                                               "cost in W&B (None: not priced)")
    usd_per_mtok_out: float | None = Field(None, ge=0, description="price per million completion tokens")

    @property
    def samples_asked(self) -> int:
        """Samples asked for per problem and backend: K, or the limit when it is smaller."""
        return min(self.samples_per_problem, self.limit_per_problem or self.samples_per_problem)

    @property
    def partial_note(self) -> str | None:
        """What a run's summary says of a sample cap (None: every sample is evaluated)."""
        if self.limit_per_problem is None:
            return None
        return f"at most {self.limit_per_problem} samples per problem (model.limit_per_problem)"

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
    format: str = Field("native", description="native: problem files of pkb_ray's format (problems_dir); or an "
                        "imported benchmark of pkb_ray.spec.formats, whose problems its own config section locates")
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
                                                  "from (pkb_ray.measure.timing); also the calibration region's calls")
    warmup: int = Field(3, ge=0, description="untimed calls of each side before timing")
    rounds: int = Field(20, ge=1, description="timed rounds per side (reference and candidate interleaved), at most")
    min_rounds: int | None = Field(None, ge=2, description="sequential stopping: after this many rounds (and every "
                                   "10 after) the rounds end once the speedup's 95 % interval lies within "
                                   "+/- target_halfwidth of it; None: always 'rounds'")
    target_halfwidth: float = Field(0.02, gt=0, description="the relative half-width of the speedup's interval at "
                                    "which sequential stopping ends the rounds (min_rounds)")
    round_us: float = Field(2000.0, gt=0, description="target length of one round; sets its back-to-back calls")
    max_round_calls: int = Field(200, ge=1, description="at most this many calls in one round")
    timeout_s: float = Field(60.0, gt=0, description="the deadline of one sample, from its trials through its "
                             "last timed region: every wait for it ends by then (pkb_ray.evaluate.deadlines)")
    startup_timeout_s: float = Field(120.0, gt=0, description="limit for rank processes to join their group")
    compile_timeout_s: float = Field(300.0, gt=0, description="limit for nvcc on one CUDA source")
    inline_build_timeout_s: float = Field(600.0, gt=0, description="extra time for the trial step of samples "
                                          "that build their extensions on the rank (load_inline; "
                                          "formats.builds_extensions)")
    torch_compile_timeout_s: float = Field(180.0, ge=0, description="extra time for a sample whose source uses "
                                           "torch.compile (or torch._dynamo / torch._inductor): its first calls "
                                           "compile on the rank, in a cache of its own that no other sample "
                                           "shares (~25 s for one small function, cold, on 2 CPU cores)")
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
    checked_calls: int = Field(150, ge=1, description="timed calls of a sample checked, on average: after each "
                               "region every call is checked with probability checked_calls / (rounds x calls "
                               "per round), decided then; its outputs and inputs are read from the candidate's "
                               "memory and a clean rank set recomputes and compares them. A sample wrong on a "
                               "fraction f of its calls passes with probability at most exp(-f x checked_calls)")
    zygote: bool = Field(True, description="fork each sample's sandboxed ranks from a template sandbox that "
                                           "imported torch once, in namespaces of their own (docs/isolation.md); "
                                           "false: a fresh sandbox and interpreter per sample (~2.5 s of CPU more)")
    touch_devices: bool = Field(True, description="on a GPU, a process of the clean rank's own runs one tiny kernel "
                                "after each timed region's inputs are written, so that both sides' regions start "
                                "with the device switching to their own process (pkb_ray.runner.toucher)")
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
    data_progress_bars: bool = Field(False, description="Ray Data's progress bars, one per operator, beside the "
                                                        "run's own")
    max_gpus: int | None = Field(None, ge=1, description="most GPUs this run's gangs hold at once (a share of a "
                                                         "joined cluster); None: as many as are free")


class WandbConfig(_Strict):
    mode: Literal["offline", "online", "disabled"] = "offline"
    project: str = "pkb_ray"
    entity: str | None = None
    group: str | None = Field(None, description="None: under -m, the sweep's date and time (2026-12-03_10-00-00), "
                                                "so a sweep's runs group together; no group for a single run")
    tags: list[str] = Field(default_factory=list)
    report: bool = Field(True, description="online runs: also save a W&B Report laid out like report.html "
                                           "(wandb-workspaces reports API)")


class RewardConfig(_Strict):
    """How a served verdict becomes a reward (pkb_ray.serve.reward; docs/serve.md#reward)."""

    kind: Literal["speedup", "binary", "fast"] = Field(
        "speedup", description="speedup: 0 unless correct, then correct_reward up to 1x, rising with log(speedup) "
        "to 1 at speedup_cap; binary: 1 if correct, else 0; fast: 1 if correct and faster than fast_p, "
        "correct_reward if only correct, else 0. Every kind: copy_reward for a copy of the reference")
    correct_reward: float = Field(0.0, ge=0, le=1, description="the reward of a correct sample no faster than the "
                                  "reference (kind speedup; fast: not faster than fast_p) or of unknown speed")
    speedup_cap: float = Field(4.0, gt=1, description="speedup at which the reward reaches 1 (kind speedup)")
    fast_p: float = Field(1.0, gt=0, description="the speedup a sample must beat for kind fast")
    failure: float = Field(0.0, le=0, description="the reward of any sample that is not correct")
    copy_reward: float = Field(0.0, le=1, description="the reward of a correct sample that is the problem's reference "
                               "up to names, comments, docstrings, annotations and formatting (reference_copy)")


class ServeProtocol(_Strict):
    """The timing protocol the service judges with (docs/serve.md#protocol); a null key keeps eval's."""

    trials: int | None = Field(3, ge=1, description="trial calls a rank (eval.trials)")
    timing_sets: int | None = Field(2, ge=1, description="base input sets of the timed calls (eval.timing_sets)")
    rounds: int | None = Field(50, ge=1, description="timed rounds a side (eval.rounds)")


class ServeConfig(_Strict):
    """``pkb-ray serve``: the reward service (docs/serve.md)."""

    host: str = Field("127.0.0.1", description="the address it listens on; any other than loopback needs a token")
    port: int = Field(8000, ge=0, le=65535)
    token_file: str | None = Field(None, description="a file holding the bearer token every request must carry")
    token_env: str = Field("PKB_RAY_SERVE_TOKEN", description="the environment variable holding it (token_file "
                                                              "first)")
    dir: str = Field("outputs/serve", description="the service's folder: results/ (Parquet, as a sweep's) and logs; "
                                                  "verdicts stored there answer repeated samples after a restart")
    model: str = Field("served", description="the model name of served results whose request names none")
    max_pending: int = Field(256, ge=1, description="requests waiting or being evaluated that are always taken; "
                                                    "beyond it, one is taken while its expected wait (those ahead x "
                                                    "the mean evaluation time / gangs) fits its deadline, else 429")
    deadline_s: float = Field(600.0, gt=0, description="a request's deadline unless it sets deadline_s: 504 after")
    openrlhf_deadline_s: float = Field(150.0, gt=0, description="the deadline of an OpenRLHF request "
                                       "(/openrlhf/reward), under the 180 s OpenRLHF gives one: a rollout without a "
                                       "verdict by then gets reward 0 with the reason")
    max_source_bytes: int = Field(256 * 1024, ge=1, description="a larger source is answered 413")
    max_batch: int = Field(512, ge=1, description="most items in one verify_batch")
    compile_workers: int = Field(2, ge=1, description="CPU actors building CUDA sources while gangs evaluate")
    protocol: ServeProtocol = ServeProtocol()
    reward: RewardConfig = RewardConfig()


class _SweepFields(_Strict):
    """The sweep's own sections and keys; :data:`SweepConfig` adds each format's section."""

    model: ModelConfig = ModelConfig()
    problems: ProblemsConfig = ProblemsConfig()
    backend: BackendConfig = BackendConfig()
    eval: EvalConfig = EvalConfig()
    hardware: HardwareConfig = HardwareConfig()
    ray: RayConfig = RayConfig()
    wandb: WandbConfig = WandbConfig()
    serve: ServeConfig = ServeConfig()
    problems_dir: str | None = Field(None, description="None: the problems/ folder of this checkout")
    output_dir: str = "."
    results_dir: str | None = Field(None, description="None: <output_dir>/results. Name a folder (or a URI: "
                                    "s3://bucket/prefix, gs://, hdfs://, file://) to resume a sweep there: samples "
                                    "with a final result are skipped")
    generated_dir: str | None = Field(None, description="None: <output_dir>/generated. Generated samples (Parquet); "
                                      "name a folder or URI to reuse them: nothing is generated twice")
    cache_dir: str = Field("~/.cache/pkb_ray", description="CUDA and torch extension builds, reused across runs")
    baselines_dir: str = Field("baselines", description="reference timings per hardware profile "
                                                        "(python -m pkb_ray.baselines writes <name>.json there)")

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir).expanduser()

    @model_validator(mode="after")
    def _generated_backends(self) -> "_SweepFields":
        if self.model.provider != "replay" and Backend.PARALLELKITTENS in (self.backend.backends or []):
            raise ValueError("backend.backends: parallelkittens samples are read from sample folders "
                             "(model.samples); a model is asked for torch, cuda or triton")
        return self


# One config: the sweep's keys and, under each imported format's name, that format's section
# (formats.settings_sections(): e.g. problems.format=<name> reads <name>.root).
SweepConfig = create_model("SweepConfig", __base__=_SweepFields, __module__=__name__,
                           **{name: (model, model()) for name, model in formats.settings_sections().items()})


# hardware.device -> the eval profile (conf/eval/<name>.yaml) tuned for it. Each hardware profile's
# defaults pick it (``- override /eval@_global_.eval: gpu``), so an eval left out follows the hardware.
EVAL_PROFILES = {"cpu": "cpu", "cuda": "gpu"}


def validate_config(raw: dict[str, Any], source: str = "config", choices: Mapping[str, Any] | None = None,
                    explicit: Collection[str] = ()) -> SweepConfig:
    """Validate a composed config; raise one ConfigError listing every error of :func:`check_config`."""
    cfg, errors = check_config(raw, choices, explicit)
    if errors:
        raise ConfigError(config_errors(errors, source))
    return cfg


def check_config(raw: dict[str, Any], choices: Mapping[str, Any] | None = None,
                 explicit: Collection[str] = ()) -> tuple[SweepConfig | None, list[str]]:
    """The validated config (None if invalid) and every error: each bad key (unknown ones with close
    matches) and an eval profile that disagrees with the hardware's device. ``choices``: Hydra's
    group choices (``hydra.runtime.choices``: they name the file of each key); ``explicit``: the
    groups the command line chose."""
    errors, cfg = [], None
    try:
        cfg = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        errors = [_describe(err, choices or {}) for err in exc.errors()]
    device = cfg.hardware.device if cfg else (raw.get("hardware") or {}).get("device", "cpu")
    mismatch = profile_mismatch(device, choices or {}, explicit)
    if mismatch:
        errors.append(mismatch)
    return (None if errors else cfg), errors


def config_errors(errors: list[str], source: str = "config") -> str:
    """One message for every error found: a line of its own each when there are several."""
    if len(errors) == 1:
        return f"{source}: {errors[0]}"
    return f"{source}: {len(errors)} errors\n" + "\n".join(f"  {e}" for e in errors)


def _describe(err: dict, choices: Mapping[str, Any]) -> str:
    loc = [str(p) for p in err["loc"]]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg += did_you_mean(loc[-1], _fields_at(loc[:-1]), prefix="".join(f"{p}." for p in loc[:-1]))
    if not loc:
        return msg
    group = loc[0] if loc[0] in choices else None  # the key came from conf/<group>/<choice>.yaml (or an override)
    where = f" (conf/{group}/{choices[group]}.yaml)" if group else (" (conf/config.yaml)" if choices else "")
    return f"{'.'.join(loc)}{where}: {msg}"


def did_you_mean(word: str, known: Collection[str], prefix: str = "") -> str:
    """'; did you mean X?' for the close matches of ``word`` among ``known`` ('' for none), each
    written after ``prefix`` (``eval.``, ``hardware=``)."""
    close = difflib.get_close_matches(word, list(known), n=2, cutoff=0.6)
    names = [f"{prefix}{c}" for c in close]
    return f"; did you mean {' or '.join(names)}?" if names else ""


def _fields_at(path: list[str]) -> list[str]:
    """The keys of the config section at ``path`` (none where it is not a section: a dict, a list)."""
    model: type[BaseModel] = SweepConfig
    for part in path:
        field = model.model_fields.get(part)
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return []
        model = field.annotation
    return list(model.model_fields)


def unknown_key(dotted: str) -> str | None:
    """The error of a command-line key that names no config key (``eval.timout_s``), else None. Keys
    below a dict-valued key (``eval.tolerances.x``) are the dict's own: not checked here."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        known = _fields_at(parts[:i])
        if not known:
            return None
        if part not in known:
            return f"{dotted}: no such key{did_you_mean(part, known, ''.join(f'{p}.' for p in parts[:i]))}"
    return None


def profile_mismatch(device: str, choices: Mapping[str, Any], explicit: Collection[str]) -> str | None:
    """Why the eval profile cannot go with the hardware's device (None: it can, or it is not ours to
    say: a profile of neither device, or eval chosen over the default hardware)."""
    hw, ev = choices.get("hardware"), choices.get("eval")
    want = EVAL_PROFILES.get(device)
    if want is None or ev == want or ev not in EVAL_PROFILES.values():
        return None
    if "eval" in explicit and "hardware" not in explicit:
        return None
    what = (f"hardware, eval: hardware.device is {device} (hardware={hw}, conf/hardware/{hw}.yaml) but eval={ev} "
            f"(conf/eval/{ev}.yaml) is the profile of another device")
    if "eval" in explicit:
        return f"{what}: choose eval={want}, or leave eval out and it follows the hardware"
    if "hardware" in explicit:
        return (f"{what}: add '- override /eval@_global_.eval: {want}' to the defaults of conf/hardware/{hw}.yaml, "
                f"or choose eval={want}")
    return f"{what}: choose eval={want}"


def key_docs(model: type[BaseModel] = SweepConfig, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) of every config key, sections flattened: the reference
    that ``--help`` prints, generated from the models so it cannot fall behind them."""
    out = []
    for name, field in model.model_fields.items():
        key, ann = f"{prefix}{name}", field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += key_docs(ann, f"{key}.")
            continue
        default = field.default_factory() if field.default_factory else field.default
        out.append((key, _type_name(ann), "null" if default is None else str(default), field.description or ""))
    return out


def _type_name(ann: Any) -> str:
    args = get_args(ann)
    if get_origin(ann) is Literal:
        return "|".join(str(a) for a in args)
    if get_origin(ann) in (Union, UnionType):
        return " | ".join(_type_name(a) for a in args)
    if get_origin(ann) in (list, dict):
        return f"{get_origin(ann).__name__}[{', '.join(_type_name(a) for a in args)}]"
    if get_origin(ann) is Annotated:
        return _type_name(args[0])
    return "null" if ann is type(None) else getattr(ann, "__name__", str(ann))
