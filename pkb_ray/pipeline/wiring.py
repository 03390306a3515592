"""Wiring of the stages for one run: rows -> validate -> compile -> evaluate -> results.

Follow one sample row:

1. :func:`sample_stream` puts the rows into a Ray Data stream. :func:`expand_row` (a task) turns
   each row into one :class:`Prepared` item per gang layout it is evaluated on: an
   :class:`~pkb_ray.spec.schema.EvalTask` (validated, its Python compiled), a Result settled before any
   rank runs (invalid, compile error), or nothing to do (its result is on disk: resume).
2. :class:`CompilePool` (CPU-only :class:`BuildCuda` actors, named compile-0, ...) builds the CUDA
   sources of each task that has any, which may turn it into a ``compile_error`` result.
3. :class:`PipelineRun` takes the items as they come: settled results go to the sink; tasks go
   to the gang pool (:class:`~pkb_ray.pipeline.gang_pool.GangPool`) through a bounded
   :class:`~pkb_ray.pipeline.gang_pool.TaskFeed`, except copies of a source already taken
   (:class:`Duplicates`), which get its verdict.
4. Each verdict, and its copies, go to the :class:`~pkb_ray.results.parquet.ResultSink`, on disk within
   about a second, so a run that dies keeps what it finished and a resumed run skips it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sys
import threading
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import ray
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from pkb_ray.pipeline.selection import private_paths
from pkb_ray.problem import Problem, load_problems
from pkb_ray.problems.backend_rules import pk_world_size
from pkb_ray.results.parquet import ResultSink, finished, key_at
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.names import Backend
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import EvalTask, Result, Sample, Where
from pkb_ray.pipeline.compile import (BuildSettings, apply_build, build_inline, build_settings, build_sources,
                                    compile_sample, needs_build, uses_cuda)
from pkb_ray.pipeline.gang_pool import GangPool, TaskFeed
from pkb_ray.pipeline.telemetry import RunMetrics
from pkb_ray.pipeline.validate import validate

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 10.0  # on_progress at most this often during a run (and once at its end)
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} results [{elapsed}{postfix}]"  # ETA: ours


def layouts_for(row: dict[str, Any], problems: dict[str, Problem], layouts: list[Layout]) -> list[Layout]:
    """The run's gang layouts whose world size this row's problem supports (the first one, if none:
    validate says why)."""
    problem = problems.get(row.get("problem_id"))
    fitting = [lay for lay in layouts if problem is not None and problem.meta.world_sizes.supports(lay.world_size)]
    if row.get("backend") == Backend.PARALLELKITTENS:  # compiled for one world size
        fitting = [lay for lay in fitting if lay.world_size == pk_world_size(str(row.get("source", "")))]
    return fitting or layouts[:1]


def prepare(row: dict[str, Any], problems: dict[str, Problem], where: Where | int,
            multicast: bool = False) -> Sample | Result:
    """Validate then compile one row: a Sample ready for a gang, or its final Result."""
    out = validate(row, problems, where, multicast=multicast)
    if isinstance(out, Sample):
        out = compile_sample(out, where, problems[out.problem_id].meta.category)
    return out


def build(sample: Sample, where: Where | int, problems: dict[str, Problem], settings: BuildSettings) -> Sample | Result:
    """The CUDA builds of one sample in this process (nothing to do for pure Python)."""
    problem = problems[sample.problem_id]
    if uses_cuda(sample):
        outcome = build_sources(sample.source, settings)
    elif needs_build(sample):  # load_inline: the sample may import what its problem names READABLE
        outcome = build_inline(sample.source, settings, tuple(getattr(problem.module, "READABLE", ())))
    else:
        return sample
    return apply_build(sample, outcome, where, problem.meta.category)


def prepare_here(row: dict[str, Any], problems: dict[str, Problem], world_size: int,
                 settings: BuildSettings) -> Sample | Result:
    """:func:`prepare`, then any CUDA builds in this process (for scripts that run without Ray)."""
    out = prepare(row, problems, world_size)
    return build(out, world_size, problems, settings) if isinstance(out, Sample) else out


@functools.lru_cache(maxsize=4)
def _problems(problems_dir: str | None) -> dict[str, Problem]:
    return load_problems(problems_dir)


def where_for(config: SweepConfig, problems: dict[str, Problem], problem_id: Any, layout: Layout) -> list[Where]:
    """Where and how this run evaluates a problem's samples on ``layout``, one Where per size of the
    run (``eval.sizes``), as every result row says it: the same for a verdict settled before any
    rank ran."""
    problem = problems.get(problem_id) if isinstance(problem_id, str) else None
    specs = config.eval.size_specs()
    try:
        labels = [label for label, _ in problem.sizes_of(specs)] if problem is not None else specs
    except KeyError:
        labels = specs
    dtype = config.eval.dtype or (problem.meta.dtypes[0] if problem is not None else "")
    return [Where(layout, hardware=config.hardware.name, device_backend=config.hardware.backend,
                  size=_size_label(label), dtype=dtype) for label in labels]


def _size_label(spec: Any) -> str:
    """A size as result rows name it, for sizes no problem resolved (an unknown problem)."""
    return spec if isinstance(spec, str) else ",".join(f"{k}={v}" for k, v in sorted(dict(spec).items()))


@dataclass(frozen=True)
class Row:
    """A sample row as it enters the stream (kept whole: rows differ in their metadata's fields)."""

    data: dict[str, Any]


@dataclass(frozen=True)
class Prepared:
    """What the stream says of one (row, layout): a task for a gang, a result settled before any rank
    ran, or neither (its final result is on disk already: resume skips it)."""

    task: EvalTask | None = None
    result: Result | None = None


def prepare_at(row: dict[str, Any], where: Where, problems: dict[str, Problem], config: SweepConfig,
               done: frozenset) -> Prepared:
    """One row evaluated ``where``, validated and its Python compiled."""
    prepared = prepare(row, problems, where, multicast=config.hardware.nvlink_multicast)
    if isinstance(prepared, Sample):
        key = key_at(prepared.key, int(prepared.metadata.get("round", 0) or 0), where)
    else:
        key = key_at(prepared.sample_key, prepared.round, where)
    if key in done:
        return Prepared()
    if isinstance(prepared, Sample):
        return Prepared(task=EvalTask(prepared, where))
    return Prepared(result=prepared)


def expand_row(item: dict[str, Row], cfg: dict[str, Any], problems_dir: str | None,
               done: frozenset) -> list[dict[str, Prepared]]:
    """Ray Data stage (a task): one sample row -> a Prepared item per layout it is evaluated on."""
    return [{"item": p} for p in prepared_items(item["row"].data, SweepConfig.model_validate(cfg),
                                                _problems(problems_dir), done)]


def prepared_items(row: dict[str, Any], config: SweepConfig, problems: dict[str, Problem],
                   done: frozenset) -> Iterator[Prepared]:
    """``row`` prepared at every (layout, size) of the run it is evaluated at."""
    for lay in layouts_for(row, problems, config.hardware.layouts):
        for where in where_for(config, problems, row.get("problem_id"), lay):
            yield prepare_at(row, where, problems, config, done)


class BuildCuda:
    """The compile actors' work (:class:`CompilePool`; the reward service's too): builds the CUDA
    sources of each task (:mod:`pkb_ray.pipeline.compile`)."""

    def __init__(self, settings: BuildSettings, problems_dir: str | None):
        self.settings = settings
        self.problems = _problems(problems_dir)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Prepared]]:
        return {"item": [self.build(item) for item in batch["item"]]}

    def build(self, item: Prepared) -> Prepared:
        if item.task is None or not needs_build(item.task.sample):
            return item
        built = build(item.task.sample, item.task.where, self.problems, self.settings)
        if isinstance(built, Result):
            return Prepared(result=built)
        return Prepared(task=EvalTask(built, item.task.where))


BUILD_RETRIES = 3  # a compile actor that dies mid-build: Ray restarts it and tries the build again, this often


class CompilePool:
    """The CPU-only actors that build CUDA sources (:class:`BuildCuda`), named compile-0, compile-1,
    ... (as the gangs are named) for the dashboard: the first when the first build comes (a run of
    Python samples starts none: each imports torch and the problems, ~2.5 s of CPU and ~0.3 GB), up
    to ``size`` while builds wait, all stopped when the stream ends. Their constructor arguments are
    small and passed inline, so Ray restarts one that dies (killed, out of memory) and retries its
    build (Ray Data's actor pools pass theirs through the object store, where Ray warns at every
    start that a restart could lose them)."""

    def __init__(self, settings: BuildSettings, problems_dir: str | None, size: int):
        self._remote = ray.remote(BuildCuda)
        # num_cpus=0: ``size`` (the cluster's CPUs by default) bounds the builds. An actor holding a
        # logical CPU holds it until the stream ends, and with every CPU held the stream's own
        # tasks, which feed these actors, never run again (a sweep stopped for good on 2 cores)
        self._options = dict(num_cpus=0, num_gpus=0, max_restarts=-1, max_task_retries=BUILD_RETRIES,
                             runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}})
        self._args, self.size = (settings, problems_dir), size
        self._actors: list = []
        self._free: list = []
        self._building: dict[ray.ObjectRef, tuple[Any, Prepared]] = {}  # a build's result -> its actor and item

    def _start(self) -> None:
        actor = self._remote.options(name=f"compile-{len(self._actors)}", **self._options).remote(*self._args)
        self._actors.append(actor)
        self._free.append(actor)

    def built(self, items: Iterable[Prepared]) -> Iterator[Prepared]:
        """``items`` with their CUDA built: one without sources to build passes at once, the others
        as their builds end (at most ``size`` at a time); the actors stop when ``items`` end."""
        try:
            for item in items:
                if item.task is None or not needs_build(item.task.sample):
                    yield item
                    continue
                if not self._free and len(self._actors) < self.size:
                    self._start()
                while not self._free:
                    yield from self._finished(block=True)
                actor = self._free.pop()
                self._building[actor.build.remote(item)] = actor, item
                yield from self._finished(block=False)
            while self._building:
                yield from self._finished(block=True)
        finally:
            self.stop()

    def _finished(self, block: bool) -> Iterator[Prepared]:
        if not self._building:
            return
        ready, _ = ray.wait(list(self._building), num_returns=1 if block else len(self._building),
                            timeout=None if block else 0)
        for ref in ready:
            actor, item = self._building.pop(ref)
            self._free.append(actor)
            try:
                yield ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                sample = item.task.sample
                raise RuntimeError(f"the compile actor building {sample.problem_id} #{sample.sample_index} died "
                                   f"{BUILD_RETRIES + 1} times") from exc

    def stop(self) -> None:
        for actor in self._actors if ray.is_initialized() else ():  # a Ray shut down took them with it
            ray.kill(actor)
        self._actors, self._free, self._building = [], [], {}


def sample_stream(rows: list[dict[str, Any]], cfg: SweepConfig, problems_dir: str | None,
                  done: set) -> Iterator[Prepared]:
    """The pipeline up to evaluation: rows -> validate/compile (a Ray Data stream) -> CUDA builds
    (:class:`CompilePool`), streamed."""
    settings = build_settings(cfg.hardware.arch, cfg.cache_path, cfg.eval.compile_timeout_s, cfg.eval.isolation,
                              private_paths(cfg), cfg.eval.inline_build_timeout_s)
    workers = cfg.eval.compile_workers or min(16, max(1, int(ray.cluster_resources().get("CPU", 1))))
    context = ray.data.DataContext.get_current()
    context.enable_fallback_to_arrow_object_ext_type = True  # our records, pickled
    # the run has one progress bar (PipelineRun's); Ray Data's, one per operator, on request
    context.enable_progress_bars = context.enable_operator_progress_bars = cfg.ray.data_progress_bars
    ds = ray.data.from_items([{"row": Row(r)} for r in rows])
    # one task at a time: a row takes well under a millisecond here, far ahead of the gangs, while each
    # further task worker Ray Data would start imports torch and the problems again (~2 s of CPU)
    ds = ds.flat_map(expand_row, fn_kwargs={"cfg": cfg.model_dump(mode="json"), "problems_dir": problems_dir,
                                            "done": frozenset(done)}, concurrency=1)
    return CompilePool(settings, problems_dir, workers).built(row["item"] for row in ds.iter_rows())


def dedup_key(task: EvalTask) -> tuple:
    """Tasks with the same key get the same verdict: evaluate one, copy it to the others."""
    sample = task.sample
    return sample.problem_id, sample.backend, task.where, hashlib.sha256(sample.source.encode()).hexdigest()


class Duplicates:
    """Identical samples (same problem, backend, source and placement) are evaluated once: the first
    is evaluated, and the others get its verdict, whether they arrive before it is known or after.
    Tasks arrive on the feed's thread and verdicts on the pool's, hence the lock."""

    def __init__(self) -> None:
        self._waiting: dict[tuple, list[Sample]] = {}  # key -> samples after the first, until its verdict
        self._verdicts: dict[tuple, Result] = {}
        self._lock = threading.Lock()

    def arrive(self, task: EvalTask) -> EvalTask | Result | None:
        """The task if it is the first of its kind (evaluate it), a copy of a verdict already known,
        or None (it will be copied when the verdict comes)."""
        key = dedup_key(task)
        with self._lock:
            verdict = self._verdicts.get(key)
            if verdict is not None:
                return verdict.copied_for(task.sample)
            if key in self._waiting:
                self._waiting[key].append(task.sample)
                return None
            self._waiting[key] = []
            return task

    def verdict(self, task: EvalTask, result: Result) -> list[Result]:
        """The copies of ``result`` for the samples identical to ``task`` that arrived before it."""
        key = dedup_key(task)
        with self._lock:
            self._verdicts[key] = result
            return [result.copied_for(sample) for sample in self._waiting.pop(key, [])]


class PipelineRun:
    """One run of the pipeline: the stream's items in, results out (sink, metrics, callbacks)."""

    def __init__(self, rows: list[dict[str, Any]], cfg: SweepConfig, problems: dict[str, Problem],
                 results_dir: Path | str, flush_every: int, resume: bool, problems_dir: str | None):
        self.rows, self.cfg, self.problems_dir, self.results_dir = rows, cfg, problems_dir, results_dir
        self.done = finished(results_dir) if resume else set()
        self.results: list[Result] = []
        self.sink = ResultSink(results_dir, max_rows=flush_every)  # on disk within about a second
        self.duplicates = Duplicates()
        self.metrics = RunMetrics()
        per_layout: Counter = Counter()  # evaluations (a row at each of its layouts and sizes) per layout
        for r in rows:
            for lay in layouts_for(r, problems, cfg.hardware.layouts):
                per_layout[lay] += len(where_for(cfg, problems, r.get("problem_id"), lay))
        self.metrics.total = sum(per_layout.values())
        # what the gangs will get, announced so they start while the stream validates and compiles;
        # a resume expects no more than what is left (settled rows never reach a gang: an overestimate)
        left = max(0, self.metrics.total - len(self.done))
        self.expected = {lay: min(n, left) for lay, n in per_layout.items() if left}
        self.bar: tqdm | None = None  # opened by open_bar, once Ray has said where its dashboard is
        self.on_result: Callable[[Result], None] | None = None
        self._lock = threading.Lock()  # results come from the feed's thread (settled rows) and the pool's

    def all_settled(self, problems: dict[str, Problem]) -> bool:
        """Whether every (row, layout, size) has its final result on disk already (a finished run's
        rerun), checked in the driver and given up at the first one that has not: it costs what
        validating those rows costs, the stream's own first step."""
        if not self.done:
            return False
        done, skipped = frozenset(self.done), 0
        for row in self.rows:
            for item in prepared_items(row, self.cfg, problems, done):
                if item.task is not None or item.result is not None:
                    return False
                skipped += 1
        self.metrics.skipped = skipped
        return True

    def open_bar(self) -> None:
        """The run's one progress bar, on a terminal (in a log the progress lines say it instead),
        with an ETA once the gangs' first result gives a rate (:meth:`RunMetrics.eta_s`)."""
        self.bar = tqdm(total=self.metrics.total, initial=self.metrics.skipped, desc="pkb_ray", bar_format=BAR_FORMAT,
                        dynamic_ncols=True, mininterval=1.0, disable=not sys.stderr.isatty())

    def _advance(self) -> None:
        if self.bar is None:
            return
        eta = self.metrics.eta_s()  # None before a gang's first result and once nothing is left
        self.bar.set_postfix_str("" if eta is None else f"ETA {tqdm.format_interval(eta)}", refresh=False)
        self.bar.update(1)

    def tasks(self) -> Iterator[EvalTask]:
        """The stream's tasks for the gangs; settled results, copies and skips are dealt with here."""
        for item in sample_stream(self.rows, self.cfg, self.problems_dir, self.done):
            if item.result is not None:
                self.emit(item.result)
            elif item.task is None:
                self.metrics.skipped += 1
                with self._lock:
                    self._advance()
            else:
                if "compile_seconds" in item.task.sample.metadata:
                    self.metrics.compiled(float(item.task.sample.metadata["compile_seconds"]))
                first = self.duplicates.arrive(item.task)
                if isinstance(first, Result):
                    self.emit(first)
                elif first is not None:
                    yield first

    def emit(self, result: Result, evaluated: bool = False) -> None:
        """A result written (``evaluated``: a gang's verdict, not one settled before any rank ran or a copy)."""
        self.metrics.result(result.status.value, result.world_size, 0.0 if result.duplicate_of else result.eval_seconds,
                            evaluated=evaluated)
        with self._lock:
            self.results.append(result)
            self.sink.add(result)
            self._advance()
            if self.on_result:
                self.on_result(result)

    def verdict(self, task: EvalTask, result: Result) -> None:
        """A gang's result, and the copies for the identical samples that wait for it."""
        self.emit(result, evaluated=True)
        for copy in self.duplicates.verdict(task, result):
            self.emit(copy)

    def close(self) -> None:
        self.sink.close()
        if self.bar is not None:
            self.bar.close()
        if self.metrics.skipped:
            log.info("resume: %d (sample, layout, size) evaluations already have a final result in %s",
                     self.metrics.skipped, self.results_dir)


def run_pipeline(rows: list[dict[str, Any]], cfg: SweepConfig, problems: dict[str, Problem],
                 results_dir: Path | str, flush_every: int = 64, on_result: Callable[[Result], None] | None = None,
                 on_progress: Callable[[RunMetrics, float], None] | None = None,
                 resume: bool = True, problems_dir: str | None = None, report: dict | None = None,
                 start: Callable[[], None] | None = None) -> list[Result]:
    """Evaluate ``rows`` into ``results_dir``; with ``resume``, rows with a final result there are skipped.

    Ray Data streams the rows through validation and compilation while the gang pool evaluates
    what is ready; the pool's bounded intake (TaskFeed) is the backpressure. ``on_progress`` is
    called at most every PROGRESS_EVERY_S and at the end; ``report`` (benchmarks) gets the pool's
    figures. ``start`` (joining or starting Ray) is called first unless every row has its final
    result already: then nothing starts and nothing is evaluated.
    """
    run = PipelineRun(rows, cfg, problems, results_dir, flush_every, resume, problems_dir)
    if run.all_settled(problems):
        log.info("resume: nothing left to evaluate in %s: no gang started", results_dir)
        run.close()
        if on_progress:
            on_progress(run.metrics, 0.0)
        return []
    if start:
        start()
    run.open_bar()
    run.on_result = on_result
    pool = GangPool(cfg, run.metrics)
    t0 = last_progress = time.monotonic()
    # with a bar, the log's lines are printed above it instead of onto it
    above = logging_redirect_tqdm() if run.bar is not None and not run.bar.disable else nullcontext()
    try:
        with above:
            for n, (task, result) in enumerate(pool.evaluate(TaskFeed(run.tasks()), run.expected), 1):
                run.verdict(task, result)
                log.info("[%d evaluated, %d results] %s #%d W=%d %s on %s (%.1fs)", n, len(run.results),
                         result.problem_id, result.sample_index, result.world_size, result.status.value, result.gang,
                         time.monotonic() - t0)
                line = run.metrics.progress_line()
                if line:
                    log.info("%s | gangs busy %.0f%% of their time", line, 100 * pool.busy_fraction)
                if on_progress and time.monotonic() - last_progress >= PROGRESS_EVERY_S:
                    on_progress(run.metrics, pool.busy_fraction)  # e.g. a W&B history step
                    last_progress = time.monotonic()
    finally:
        pool.shutdown()
        if report is not None:
            report.update(evaluated=pool.stats["evaluated"], busy_fraction=pool.busy_fraction,
                          busy_s=pool.busy_s, alive_s=pool.alive_s)
        run.close()
        if on_progress:
            on_progress(run.metrics, pool.busy_fraction)
    return run.results
