"""Wiring of the stages for one run: rows -> validate -> compile -> evaluate -> results.

A Ray Data stream validates each row and checks its Python (``expand_row``, tasks), builds its
CUDA sources (``BuildCuda``, CPU-only actors), and feeds the gang pool, which evaluates while the
stream runs. Each row is evaluated at every world size of ``hardware.world_sizes`` that its
problem supports. Each result is on disk within about a second (:class:`pkb_ray.results.ResultSink`),
so a run that dies keeps what it finished, and a run resumed on the same folder skips it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import json
import logging
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import ray
from tqdm import tqdm

from pkb_ray.config import SweepConfig
from pkb_ray.pkb.static import PK_BACKEND, pk_world_size
from pkb_ray.placement import Layout
from pkb_ray.problem import Problem, load_problems
from pkb_ray.results import ResultSink, finished
from pkb_ray.schema import Result, Sample
from pkb_ray.selection import private_paths
from pkb_ray.stages.compile import (BuildSettings, apply_build, build_inline, build_settings, build_sources,
                                    compile_sample, needs_build, uses_cuda)
from pkb_ray.stages.evaluate import GangPool, TaskFeed
from pkb_ray.stages.validate import validate
from pkb_ray.telemetry import RunMetrics

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 10.0  # on_progress at most this often during a run (and once at its end)


def select_rows(rows: list[dict[str, Any]], cfg: SweepConfig, problems: dict[str, Problem]) -> list[dict[str, Any]]:
    """Keep the rows of the problems and backends this run covers (rows naming unknown problems stay:
    validate reports them)."""
    ids = set(cfg.problems.ids or problems)
    if cfg.problems.categories:
        ids &= {p.id for p in problems.values() if p.meta.category in cfg.problems.categories}
    backends = cfg.backend.backends
    return [r for r in rows if (r.get("problem_id") in ids or r.get("problem_id") not in problems)
            and (backends is None or r.get("backend", "torch") in backends)]


def layouts_for(row: dict[str, Any], problems: dict[str, Problem], layouts: list[Layout]) -> list[Layout]:
    """The run's gang layouts whose world size this row's problem supports (the first one, if none:
    validate says why)."""
    problem = problems.get(row.get("problem_id"))
    fitting = [lay for lay in layouts if problem is not None and problem.meta.world_sizes.supports(lay.world_size)]
    if row.get("backend") == PK_BACKEND:  # compiled for one world size
        fitting = [lay for lay in fitting if lay.world_size == pk_world_size(str(row.get("source", "")))]
    return fitting or layouts[:1]


def prepare(row: dict[str, Any], problems: dict[str, Problem], world_size: int, multicast: bool = False,
            hardware: str = "") -> Sample | Result:
    """Validate then compile one row: a Sample ready for a gang, or its final Result."""
    out = validate(row, problems, world_size, multicast=multicast, hardware=hardware)
    if isinstance(out, Sample):
        out = compile_sample(out, world_size, problems[out.problem_id].meta.category)
    return out


def build(sample: Sample, world_size: int, problems: dict[str, Problem], settings: BuildSettings) -> Sample | Result:
    """The CUDA builds of one sample in this process (nothing to do for pure Python)."""
    problem = problems[sample.problem_id]
    if uses_cuda(sample):
        outcome = build_sources(sample.source, settings)
    elif needs_build(sample):  # PKB's load_inline: the sample imports its problem's checkout
        outcome = build_inline(sample.source, settings, tuple(getattr(problem.module, "READABLE", ())))
    else:
        return sample
    return apply_build(sample, outcome, world_size, problem.meta.category)


def prepare_here(row: dict[str, Any], problems: dict[str, Problem], world_size: int,
                 settings: BuildSettings) -> Sample | Result:
    """:func:`prepare`, then any CUDA builds in this process (for scripts that run without Ray)."""
    out = prepare(row, problems, world_size)
    return build(out, world_size, problems, settings) if isinstance(out, Sample) else out


def dedup_key(sample: Sample | Result, layout: Layout) -> tuple:
    """Samples with the same key get the same verdict: evaluate one, copy it to the others."""
    return (sample.problem_id, sample.backend, layout, hashlib.sha256(sample.source.encode()).hexdigest())


def as_duplicate(result: Result, sample: Sample) -> Result:
    """``result`` (of an identical sample) under ``sample``'s identity."""
    return result.model_copy(update={"sample_key": sample.key, "model": sample.model, "sample_index": sample.sample_index,
                                     "duplicate_of": result.sample_key})


@functools.lru_cache(maxsize=4)
def _problems(problems_dir: str | None) -> dict[str, Problem]:
    return load_problems(problems_dir)


def identity(config: SweepConfig, problems: dict[str, Problem], problem_id: Any) -> dict[str, str]:
    """Where and how this run evaluates a problem's samples, as every result row says it (part of
    :data:`pkb_ray.results.RESULT_KEY`): the same for a verdict settled before any rank ran."""
    problem = problems.get(problem_id) if isinstance(problem_id, str) else None
    size: Any = config.eval.size
    try:
        label = problem.size(size)[0] if problem is not None else size
    except KeyError:
        label = size
    label = label if isinstance(label, str) else ",".join(f"{k}={v}" for k, v in sorted(dict(label).items()))
    dtype = config.eval.dtype or (problem.meta.dtypes[0] if problem is not None else "")
    return {"hardware": config.hardware.name, "device_backend": config.hardware.backend, "size": label,
            "dtype": dtype}


def expand_row(item: dict[str, Any], cfg: dict[str, Any], problems_dir: str | None,
               done: frozenset) -> list[dict[str, Any]]:
    """Ray Data stage (validate + Python compile): one sample row -> a task or a settled result per world size."""
    config = SweepConfig.model_validate(cfg)
    problems = _problems(problems_dir)
    row = json.loads(item["row"])
    ident = identity(config, problems, row.get("problem_id"))
    out = []
    for lay in layouts_for(row, problems, config.hardware.layouts):
        world, where = lay.world_size, {"world": lay.world_size, "nodes": lay.nodes, "size": ident["size"],
                                        "dtype": ident["dtype"]}
        prepared = prepare(row, problems, world, multicast=config.hardware.nvlink_multicast,
                           hardware=config.hardware.name)
        if isinstance(prepared, Sample):
            key = (prepared.key, int(prepared.metadata.get("round", 0) or 0))
        else:
            key = (prepared.sample_key, prepared.round)
        if (key[0], world, lay.nodes, ident["size"], ident["dtype"], ident["hardware"], key[1]) in done:
            out.append({"kind": "skip", "payload": "", **where})
        elif isinstance(prepared, Sample):
            out.append({"kind": "task", "payload": prepared.model_dump_json(), **where})
        else:  # settled before any rank ran: still say where and how it would have run
            settled = prepared.model_copy(update={**ident, "nodes": lay.nodes})
            out.append({"kind": "result", "payload": settled.model_dump_json(), **where})
    return out


class BuildCuda:
    """Ray Data stage on CPU-only actors: builds the CUDA sources of each task (see stages.compile)."""

    def __init__(self, settings: BuildSettings, hardware: dict[str, Any], problems_dir: str | None):
        self.settings = settings
        self.hardware = hardware
        self.problems = _problems(problems_dir)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        kinds, payloads = list(batch["kind"]), list(batch["payload"])
        for i, (kind, payload) in enumerate(zip(kinds, payloads)):
            if kind != "task":
                continue
            sample = Sample.model_validate_json(payload)
            if not needs_build(sample):
                continue
            built = build(sample, int(batch["world"][i]), self.problems, self.settings)
            if isinstance(built, Result):
                update = {**self.hardware, "nodes": int(batch["nodes"][i]), "size": batch["size"][i],
                          "dtype": batch["dtype"][i]}
                kinds[i], payloads[i] = "result", built.model_copy(update=update).model_dump_json()
            else:
                payloads[i] = built.model_dump_json()
        return {"kind": kinds, "payload": payloads, **{k: list(batch[k]) for k in ("world", "nodes", "size", "dtype")}}


def compile_actor_names() -> dict[str, Any]:
    """``map_batches`` arguments that name the compile actors compile-0, compile-1, ... (as the gangs
    are named), so the dashboard's actor list says what each one is. Ray Data asks the function
    for each actor it starts. Ray 2.60 deprecates ``ray_remote_args_fn`` and names no successor:
    without it (a later Ray), the actors keep Ray Data's own name."""
    if "ray_remote_args_fn" not in inspect.signature(ray.data.Dataset.map_batches).parameters:
        return {}
    counter = itertools.count()
    return {"ray_remote_args_fn": lambda: {"name": f"compile-{next(counter)}"}}


def sample_stream(rows: list[dict[str, Any]], cfg: SweepConfig, problems_dir: str | None, done: set):
    """The Ray Data pipeline up to evaluation: rows -> validate/compile -> CUDA builds, streamed."""
    settings = build_settings(cfg.hardware.arch, cfg.cache_path, cfg.eval.compile_timeout_s, cfg.eval.isolation,
                              private_paths(cfg), cfg.eval.inline_build_timeout_s)
    workers = cfg.eval.compile_workers or min(16, max(1, int(ray.cluster_resources().get("CPU", 1))))
    ds = ray.data.from_items([{"row": json.dumps(r, default=str)} for r in rows])
    ds = ds.flat_map(expand_row, fn_kwargs={"cfg": cfg.model_dump(mode="json"), "problems_dir": problems_dir,
                                            "done": frozenset(done)})
    with warnings.catch_warnings():  # the deprecation of ray_remote_args_fn (see compile_actor_names)
        warnings.simplefilter("ignore", DeprecationWarning)
        ds = ds.map_batches(BuildCuda, batch_size=1, compute=ray.data.ActorPoolStrategy(min_size=1, max_size=workers),
                            fn_constructor_kwargs={"settings": settings, "problems_dir": problems_dir,
                                                   "hardware": {"hardware": cfg.hardware.name,
                                                                "device_backend": cfg.hardware.backend}},
                            num_cpus=1, num_gpus=0, runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}},
                            **compile_actor_names())
    return ds.iter_rows()


def run_pipeline(rows: list[dict[str, Any]], cfg: SweepConfig, problems: dict[str, Problem], results_dir: Path,
                 flush_every: int = 64, on_result: Callable[[Result], None] | None = None,
                 on_progress: Callable[[RunMetrics, float], None] | None = None,
                 resume: bool = True, problems_dir: str | None = None, report: dict | None = None) -> list[Result]:
    """Evaluate ``rows`` into ``results_dir``; with ``resume``, rows with a final result there are skipped.

    Ray Data streams the rows through validation and compilation while the gang pool evaluates
    what is ready; the pool's bounded intake (TaskFeed) is the backpressure. Identical samples are
    evaluated once: later copies get the verdict (``duplicate_of``) as soon as it exists.
    """
    done = finished(results_dir) if resume else set()
    results: list[Result] = []
    sink = ResultSink(results_dir, max_rows=flush_every)  # on disk within about a second
    lock = threading.Lock()  # results arrive from the feed thread (settled rows) and the pool (verdicts)
    groups: dict[tuple, list[Sample]] = {}
    verdicts: dict[tuple, Result] = {}
    counts = Counter()

    metrics = RunMetrics()
    metrics.total = sum(len(layouts_for(r, problems, cfg.hardware.layouts)) for r in rows)
    bar = tqdm(total=metrics.total, unit="result", desc="pkb_ray", dynamic_ncols=True, mininterval=1.0,
               disable=not sys.stderr.isatty())  # in a log (no terminal) the progress line says it instead

    def emit(result: Result) -> None:
        metrics.result(result.status.value, result.world_size, 0.0 if result.duplicate_of else result.eval_seconds)
        bar.update(1)
        with lock:
            results.append(result)
            sink.add(result)
            if on_result:
                on_result(result)

    def tasks():
        for item in sample_stream(rows, cfg, problems_dir, done):
            counts[item["kind"]] += 1
            if item["kind"] == "skip":
                metrics.skipped += 1
                bar.update(1)
            if item["kind"] == "result":
                emit(Result.model_validate_json(item["payload"]))
            elif item["kind"] == "task":
                nodes, world = int(item["nodes"]), int(item["world"])
                sample, lay = Sample.model_validate_json(item["payload"]), Layout(nodes, world // nodes)
                if "compile_seconds" in sample.metadata:
                    metrics.compiled(float(sample.metadata["compile_seconds"]))
                key = dedup_key(sample, lay)
                with lock:
                    verdict = verdicts.get(key)
                    first = key not in groups
                    groups.setdefault(key, []).append(sample)
                if verdict is not None:
                    emit(as_duplicate(verdict, sample))
                elif first:
                    yield sample, lay

    pool = GangPool(cfg, metrics)
    t0 = last_progress = time.monotonic()
    try:
        for n, result in enumerate(pool.evaluate(TaskFeed(tasks())), 1):
            key = dedup_key(result, result.layout)
            with lock:
                verdicts[key] = result
                copies = groups.get(key, [])[1:]
            emit(result)
            for sample in copies:
                emit(as_duplicate(result, sample))
            log.info("[%d evaluated, %d results] %s #%d W=%d %s on %s (%.1fs)", n, len(results), result.problem_id,
                     result.sample_index, result.world_size, result.status.value, result.gang, time.monotonic() - t0)
            line = metrics.progress_line()
            if line:
                log.info("%s | gangs busy %.0f%% of their time", line, 100 * pool.busy_fraction)
            if on_progress and time.monotonic() - last_progress >= PROGRESS_EVERY_S:
                on_progress(metrics, pool.busy_fraction)  # e.g. a W&B history step
                last_progress = time.monotonic()
    finally:
        pool.shutdown()
        if report is not None:  # for benchmarks
            report.update(evaluated=pool.stats["evaluated"], busy_fraction=pool.busy_fraction,
                          busy_s=pool.busy_s, alive_s=pool.alive_s)
        sink.close()
        bar.close()
        if on_progress:
            on_progress(metrics, pool.busy_fraction)
    if counts["skip"]:
        log.info("resume: %d (sample, world size) pairs already have a final result in %s", counts["skip"], results_dir)
    return results
