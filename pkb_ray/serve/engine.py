"""The evaluation path kept warm for requests: what ``pkb-ray serve`` runs behind its HTTP API.

A request goes the sweep's way (:mod:`pkb_ray.pipeline.wiring`), with the same functions:

1. :meth:`Engine.submit` answers at once from the verdict cache (problem, backend, source, with
   the evaluator's version and settings), joins an identical request already in flight, or takes
   the request: always while fewer than ``serve.max_pending`` are unanswered, beyond that while its
   expected wait (the requests ahead x the mean evaluation time / the gangs) fits its deadline;
   else it refuses (:class:`Busy`, with when to try again).
2. A preparing thread validates and compiles the row (``prepared_items``, as a sweep's stream
   does); CUDA sources are built on CPU-only compile actors (``BuildCuda``, the sweep's compile
   stage), while the gangs evaluate other samples. A row settled here (invalid, compile error)
   is answered without a gang.
3. One thread runs a :class:`~pkb_ray.pipeline.gang_pool.GangPool` on a feed that never ends: gangs are
   planned for every layout at start and stay warm; a gang that dies or goes silent gives its
   sample a ``crash`` or ``timeout`` verdict and is restarted (the pool's own rules). Should the
   pool itself fail, every request it held is answered with :class:`EvaluatorFailed` and a new
   pool starts.
4. Each verdict goes to the results folder (the sweep's Parquet layout, so ``pkb-ray report``
   reads a service's history), to the cache, and to every request waiting on it.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import queue
import threading
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import ray

from pkb_ray.pipeline.compile import build_settings, needs_build
from pkb_ray.pipeline.gang_pool import GangPool, TaskFeed
from pkb_ray.pipeline.scheduler import GangPhase
from pkb_ray.pipeline.selection import private_paths
from pkb_ray.pipeline.telemetry import RunMetrics
from pkb_ray.pipeline.wiring import BuildCuda, Prepared, prepared_items
from pkb_ray.problem import Problem, load_problems
from pkb_ray.results.parquet import ResultSink, read_result_records
from pkb_ray.serve.answers import config_digest, evaluator_version
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.schema import EvalTask, Result

log = logging.getLogger(__name__)

PLANNED = 10 ** 9  # tasks announced per layout at start: the pool plans (and keeps) its gangs for them
# verdicts the evaluator's own trouble gave, which a later request must not get from the cache
NOT_THE_SAMPLES = ("the gang evaluating this sample died", "the evaluator's gang stopped answering")
# CPython 3.11 keeps the depth of ast.parse's conversion in interpreter-wide state: a thread paused
# mid-conversion (a finalizer run by the GC lets another thread in) while another parses fails with
# "SystemError: AST constructor recursion depth mismatch" (cpython gh-106905). The replica's threads
# that parse sources (the prepare threads validating, the HTTP handlers' answers) take this lock.
PARSING = threading.Lock()


class Busy(Exception):
    """No room: the request would not be answered by its deadline; try again after ``retry_after`` seconds."""

    def __init__(self, pending: int, max_pending: int, expected_wait: float, deadline_s: float | None,
                 retry_after: float):
        past = (f", and this request's expected wait ({expected_wait:.0f} s) is past its deadline ({deadline_s:g} s)"
                if deadline_s is not None else "")
        super().__init__(f"{pending} requests are being evaluated or wait (serve.max_pending={max_pending}){past}; "
                         f"retry later")
        self.expected_wait, self.retry_after = expected_wait, retry_after


class EvaluatorFailed(Exception):
    """The evaluator itself failed with this request in hand (not the sample's doing): ask again."""


@dataclass(frozen=True)
class Request:
    """One sample to judge, as a request gives it."""

    problem_id: str
    source: str
    backend: str = "torch"
    sample_id: str | None = None
    model: str | None = None

    @property
    def key(self) -> str:
        """The cache's key (with the engine's digest): the same problem, backend and source."""
        return hashlib.sha256(f"{self.problem_id}\0{self.backend}\0{self.source}".encode()).hexdigest()


@dataclass(frozen=True)
class Verdict:
    result: Result
    cached: bool


class Engine:
    """Evaluates requests on warm gangs; thread-safe. :meth:`close` stops everything it started."""

    def __init__(self, cfg: SweepConfig, problems: dict[str, Problem] | None = None):
        self.cfg = cfg
        self.problems = problems if problems is not None else load_problems(cfg.problems_dir)
        self.results_dir = Path(cfg.results_dir or Path(cfg.output_dir) / "results")
        self.results_dir.mkdir(parents=True, exist_ok=True)  # before any gang starts: rank sandboxes hide it
        self.digest = config_digest(cfg)
        self.metrics = RunMetrics()
        self.started = time.time()
        self.error: str | None = None  # the pool's last failure, until it evaluates again
        self.pool: GangPool | None = None
        self._mean_eval_s = 5.0  # running mean of gang time per sample (admission, Retry-After); a guess at first
        self._lock = threading.Lock()
        self._cache: dict[str, Result] = {}
        self._waiting: dict[str, list[Future]] = {}  # key -> requests for it, until its verdict
        self._at_pool: dict[str, str] = {}  # sample key -> request key, for the tasks the pool holds
        self._indexes: dict[tuple[str, str], Iterator[int]] = {}
        self._counts: dict[str, int] = defaultdict(int)
        self._tasks: queue.Queue = queue.Queue()
        self._closed = threading.Event()
        self._restore()
        self.sink = ResultSink(self.results_dir, max_rows=16, max_wait_s=0.5)
        self._builders = self._start_builders()
        self._prepare = ThreadPoolExecutor(max(2, cfg.serve.compile_workers), thread_name_prefix="serve-prepare")
        self._pool_thread = threading.Thread(target=self._run_pool, name="serve-gangs", daemon=True)
        self._pool_thread.start()

    # ---- requests ----

    def submit(self, request: Request, deadline_s: float | None = None) -> Future:
        """A future of the request's :class:`Verdict` (done at once for a cached one); :class:`Busy`
        when there is no room for it (:meth:`submit_all`)."""
        return self.submit_all([request], deadline_s)[0]

    def submit_all(self, requests: list[Request], deadline_s: float | None = None) -> list[Future]:
        """Futures of the requests' verdicts, in their order, or :class:`Busy` with none of them taken.

        Taken while the unanswered requests stay within ``serve.max_pending``; beyond it, while the
        expected wait of the last new one fits ``deadline_s`` (a request with no deadline is not
        taken beyond it). Cached and in-flight samples take no room."""
        futures, started = [], []
        with self._lock:
            new = {r.key for r in requests if r.key not in self._cache and r.key not in self._waiting}
            self._admit(len(new), deadline_s)
            for request in requests:
                future: Future = Future()
                key = request.key
                if (hit := self._cache.get(key)) is not None:
                    self._counts["cached"] += 1
                    future.set_result(Verdict(hit, True))
                elif key in self._waiting:  # the same sample is being judged: share its verdict
                    self._waiting[key].append(future)
                else:
                    self._waiting[key] = [future]
                    started.append((key, request))
                futures.append(future)
        for key, request in started:
            self._prepare.submit(self._prepare_one, key, request)
        return futures

    def expected_wait(self, position: int) -> float:
        """Seconds until the verdict of the request at ``position`` (1: the next) of the unanswered
        ones: the gangs take them ``gangs`` at a time, each for the measured mean evaluation time.
        All gangs count, whatever their layout (an estimate, not a schedule)."""
        ready = self.gangs()
        gangs = max(1, ready.get("idle", 0) + ready.get("busy", 0))
        return math.ceil(position / gangs) * self._mean_eval_s

    def _admit(self, new: int, deadline_s: float | None) -> None:
        """Under the lock: return if ``new`` more requests may be taken, else raise :class:`Busy`."""
        pending, limit = len(self._waiting), self.cfg.serve.max_pending
        if new == 0 or pending + new <= limit:
            return
        wait = self.expected_wait(pending + new)
        if deadline_s is not None and wait <= deadline_s:
            return
        # the queue drains about a second of expected wait a second: then the same request fits
        late = wait - deadline_s if deadline_s is not None else self.expected_wait(pending + new - limit)
        raise Busy(pending, limit, wait, deadline_s, max(1.0, min(60.0, late)))

    def pending(self) -> int:
        with self._lock:
            return len(self._waiting)

    def gangs(self) -> dict[str, int]:
        """Gangs by phase (reserving, starting, idle, busy)."""
        pool = self.pool
        if pool is None:
            return {}
        return {phase.value: len(pool.scheduler.in_phase(phase)) for phase in GangPhase}

    def health(self) -> dict[str, Any]:
        gangs = self.gangs()
        with self._lock:
            return {"ok": self._pool_thread.is_alive() and not self._closed.is_set(), "error": self.error,
                    "pending": len(self._waiting), "cached_verdicts": len(self._cache),
                    "evaluated": self._counts["evaluated"], "cache_hits": self._counts["cached"],
                    "uptime_s": round(time.time() - self.started, 1), "evaluator_version": evaluator_version(),
                    "results_dir": str(self.results_dir), "gangs": gangs,
                    "gangs_ready": gangs.get("idle", 0) + gangs.get("busy", 0)}

    def close(self) -> None:
        """Stop the gangs (their placement groups go back), the compile actors and the threads. What is
        queued or being evaluated is abandoned (its callers get an error), not finished first."""
        self._closed.set()
        if self.pool is not None:
            self.pool.abandon()
        self._tasks.put(None)
        self._pool_thread.join(timeout=120)
        self._prepare.shutdown(wait=False, cancel_futures=True)
        for actor in self._builders:
            ray.kill(actor)
        self.sink.close()
        self._fail_all("the service is shutting down")

    # ---- the stages ----

    def _prepare_one(self, key: str, request: Request) -> None:
        """Validate and compile (the sweep's functions), build CUDA on a compile actor, then queue
        for the gangs, or settle here."""
        try:
            row = self._row(request)
            with PARSING:
                prepared = next(prepared_items(row, self.cfg, self.problems, frozenset()))
            if prepared.result is not None:
                return self._settle(key, prepared.result)
            task = prepared.task
            if needs_build(task.sample):
                built = self._build(task)
                if isinstance(built, Result):
                    return self._settle(key, built)
                task = built
            with self._lock:
                self._at_pool[task.sample.key] = key
            self._tasks.put(task)
        except EvaluatorFailed as exc:
            self._fail(key, exc)
        except Exception as exc:  # noqa: BLE001 - an evaluator bug must still answer the request
            log.exception("serve: preparing a request failed")
            self._fail(key, EvaluatorFailed(f"the evaluator failed while preparing this sample: {exc!r}"))

    def _row(self, request: Request) -> dict[str, Any]:
        model = request.model or self.cfg.serve.model
        with self._lock:
            index = next(self._indexes.setdefault((model, request.problem_id), itertools.count()))
        metadata = {"sample_id": request.sample_id} if request.sample_id else {}
        return {"problem_id": request.problem_id, "model": model, "sample_index": index, "backend": request.backend,
                "source": request.source, "metadata": metadata}

    def _build(self, task: EvalTask) -> EvalTask | Result:
        actor = self._free_builders.get()
        try:
            item = ray.get(actor.build.remote(Prepared(task=task)))
        except ray.exceptions.RayActorError as exc:
            # the compile actor died (killed, out of memory): a new one takes its place, and this
            # request is answered as the evaluator's failure, which asking again mends
            actor = self._replace_builder(actor)
            raise EvaluatorFailed(f"the compile actor building this sample died ({type(exc).__name__}); it "
                                  f"has been replaced: ask again") from exc
        finally:
            self._free_builders.put(actor)
        return item.result if item.result is not None else item.task

    def _start_builders(self) -> list:
        self._build_settings = build_settings(self.cfg.hardware.arch, self.cfg.cache_path,
                                              self.cfg.eval.compile_timeout_s, self.cfg.eval.isolation,
                                              private_paths(self.cfg), self.cfg.eval.inline_build_timeout_s)
        self._builder_names = itertools.count()
        actors = [self._new_builder() for _ in range(self.cfg.serve.compile_workers)]
        self._free_builders: queue.Queue = queue.Queue()
        for actor in actors:
            self._free_builders.put(actor)
        return actors

    def _new_builder(self):
        # no CPU reserved: a long-lived service must not hold CPUs that sweeps on the same cluster
        # schedule their own stages on (nvcc runs only while a CUDA sample is built)
        remote = ray.remote(num_cpus=0, num_gpus=0, runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}})(BuildCuda)
        return remote.options(name=f"serve-compile-{next(self._builder_names)}").remote(self._build_settings,
                                                                                         self.cfg.problems_dir)

    def _replace_builder(self, dead):
        actor = self._new_builder()
        with self._lock:
            self._builders = [actor if a is dead else a for a in self._builders]
        return actor

    def _run_pool(self) -> None:
        """The gangs' thread: a pool on a feed that ends only with :meth:`close`; a new one if it fails."""
        while not self._closed.is_set():
            pool = self.pool = GangPool(self.cfg, self.metrics)
            try:
                expected = {layout: PLANNED for layout in self.cfg.hardware.layouts}
                for task, result in pool.evaluate(TaskFeed(self._feed()), expected):
                    self.error = None
                    with self._lock:
                        key = self._at_pool.pop(task.sample.key, None)
                    if key is not None:
                        self._settle(key, result)
            except Exception as exc:  # noqa: BLE001 - answer what it held, then start again
                log.exception("serve: the gang pool failed; starting a new one")
                self.error = f"the gang pool failed: {exc!r}"
                with self._lock:
                    held = list(self._at_pool.values())
                    self._at_pool.clear()
                for key in held:
                    self._fail(key, EvaluatorFailed(f"the evaluator's gang pool failed with this sample: {exc!r}"))
                self._closed.wait(2.0)
            finally:
                pool.shutdown()

    def _feed(self) -> Iterator[EvalTask]:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            yield task

    # ---- verdicts ----

    def _settle(self, key: str, result: Result) -> None:
        result = result.model_copy(update={"versions": {**result.versions, "pkb_ray": evaluator_version(),
                                                        "serve": self.digest}})
        self.sink.add(result)
        self.metrics.result(result.status.value, result.world_size, result.eval_seconds)
        with self._lock:
            self._counts["evaluated"] += 1
            if result.eval_seconds:
                self._mean_eval_s += 0.1 * (result.eval_seconds - self._mean_eval_s)
            if not result.message.startswith(NOT_THE_SAMPLES):
                self._cache[key] = result
            futures = self._waiting.pop(key, [])
        for future in futures:
            future.set_result(Verdict(result, False))

    def _fail(self, key: str, error: Exception) -> None:
        with self._lock:
            futures = self._waiting.pop(key, [])
        for future in futures:
            future.set_exception(error)

    def _fail_all(self, why: str) -> None:
        with self._lock:
            keys = list(self._waiting)
        for key in keys:
            self._fail(key, EvaluatorFailed(why))

    def _restore(self) -> None:
        """Verdicts this service stored before (same code, same settings) answer again from the cache;
        sample indexes go on after the highest stored one."""
        highest: dict[tuple[str, str], int] = {}
        for result in read_result_records(self.results_dir):
            key = (result.model, result.problem_id)
            highest[key] = max(highest.get(key, -1), result.sample_index)
            if result.versions.get("serve") == self.digest and not result.message.startswith(NOT_THE_SAMPLES):
                request = Request(result.problem_id, result.source, result.backend)
                self._cache[request.key] = result
        self._indexes = {key: itertools.count(n + 1) for key, n in highest.items()}
        if self._cache:
            log.info("serve: %d stored verdicts of this evaluator in %s answer from the cache", len(self._cache),
                     self.results_dir)

