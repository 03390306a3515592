"""Starting or joining Ray for a run, and saying at start what the run will get.

:func:`start_ray` joins the cluster of ``ray.address`` or starts a local one (logical GPUs on a
CPU machine, so that gangs of gloo ranks are placed like GPU gangs), says where the dashboard is
and how to open it, and checks that the cluster can hold a gang of every layout the run needs.
:func:`announce_isolation` probes the sandbox level before anything starts. A local Ray dies with
its driver, however the driver ends (:mod:`pkb_ray.isolation.reaper`). API keys stay in the driver: a local
Ray starts without them (:func:`without_secrets`), so no worker, actor or job of it can read one.

What the terminal shows (:func:`route_logs`): Ray's and Ray Data's own log records go to the run's
log file, not the terminal (which keeps their errors); so does the isolation level's long form,
while the terminal gets one line of it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import ray

from pkb_ray.isolation import reaper, sandbox
from pkb_ray.spec.config import ConfigError, SweepConfig
from pkb_ray.spec.paths import CONF_DIR
from pkb_ray.spec.placement import fits, no_room, over_cap

log = logging.getLogger(__name__)
FILE_ONLY = logging.getLogger("pkb_ray.log_file")  # what only the run's log file gets (route_logs)
RAY_LOGGERS = ("ray", "ray.data")  # Ray's and Ray Data's own (each with a handler of its own, to stderr)
NOSET_CUDA = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"
GRAFANA_DASHBOARD = CONF_DIR / "grafana" / "pkb_ray_dashboard.json"


class _LocalRay:
    """The local Ray this process started, while it runs: a later job of a Hydra multirun may use it again."""

    def __init__(self) -> None:
        self.settings: tuple | None = None  # its local_settings(); None: none started (or a cluster joined)


_local = _LocalRay()


def start_ray(cfg: SweepConfig) -> None:
    """Join the Ray cluster of ``cfg.ray.address``, or start a local one (logical GPUs on CPU); then
    check that it can hold a gang of every layout of the run, or raise ConfigError naming the key."""
    check_start(cfg)
    join_or_start(cfg)


def check_start(cfg: SweepConfig) -> None:
    """What can be known before Ray starts, said or raised now: the isolation level (announced, or
    ConfigError) and, for a local Ray (one node whose GPUs are known), whether every layout fits."""
    route_logs()
    announce_isolation(cfg.eval.isolation)
    local = local_gpus(cfg)
    if local is not None and not ray.is_initialized():
        _check_room(cfg, {"local": local})


def join_or_start(cfg: SweepConfig) -> None:
    """:func:`start_ray` after :func:`check_start`: a run that may have nothing to evaluate (all of
    it resumed) calls this only once it has (pkb_ray.pipeline.wiring.run_pipeline's ``start``). A local Ray
    an earlier job of this process started (a Hydra multirun: :func:`end_job`) is used again where
    this job would start the same one, and replaced where it would not."""
    os.environ[NOSET_CUDA] = "1"  # ranks pick their own GPU among all of the node's
    route_logs()  # again: a multirun's job has a log file of its own
    if ray.is_initialized() and _local.settings is not None:
        if not cfg.ray.address and _local.settings == local_settings(cfg):
            log.info("using the local Ray an earlier job of this sweep started (same settings)")
        else:
            ray.shutdown()  # started for other settings, or this job joins a cluster instead
            _local.settings = None
    if not ray.is_initialized():
        _init_ray(cfg)
    _check_room(cfg, node_gpus())


def local_settings(cfg: SweepConfig) -> tuple:
    """What a local Ray for ``cfg`` is started with: two jobs that agree on it can share one."""
    return (cfg.ray.num_cpus, local_gpus(cfg), repr(sorted((cfg.ray.resources or {}).items())),
            cfg.ray.include_dashboard)


def end_job(keep: bool) -> None:
    """After a job: shut down the local Ray it started, or (``keep``, the job of a Hydra multirun
    whose next job may need the same one) leave it for that job; Ray shuts it down when the process
    exits. A cluster that was joined is left alone either way."""
    if ray.is_initialized() and _local.settings is not None and not keep:
        ray.shutdown()
        _local.settings = None


def local_gpus(cfg: SweepConfig) -> int | None:
    """The GPUs of the one node a local Ray for ``cfg`` gets (logical ones on CPU), where known
    before it starts; None when it joins a cluster or Ray counts a GPU machine's own."""
    if cfg.ray.address:
        return None
    if cfg.ray.num_gpus is not None:
        return int(cfg.ray.num_gpus)
    return cfg.hardware.gpus_per_node * cfg.hardware.nodes if cfg.hardware.device == "cpu" else None


def room_problems(cfg: SweepConfig, gpus: dict[str, int]) -> list[str]:
    """Why a cluster with ``gpus`` per node cannot run ``cfg``'s gangs, one line per layout that does
    not fit or exceeds ``ray.max_gpus``, each naming its key (empty: it can)."""
    problems = []
    for lay in cfg.hardware.layouts:
        if why := over_cap(lay, cfg.ray.max_gpus):
            problems.append(f"ray.max_gpus: {why}")
        if not fits(lay, gpus):
            key = ("hardware.world_sizes" if lay.nodes == 1 else
                   f"hardware.spread.{cfg.hardware.spread_layouts.index(lay)}")
            problems.append(f"{key}: {no_room(lay, gpus, cpu=cfg.hardware.device == 'cpu')}")
    return problems


def _check_room(cfg: SweepConfig, gpus: dict[str, int]) -> None:
    if problems := room_problems(cfg, gpus):
        raise ConfigError(problems[0])


class _Into(logging.Handler):
    """Hands records of ``level`` and above to ``target`` (a file handler of the root logger), so
    that a logger that does not propagate writes into the run's log file too."""

    def __init__(self, target: logging.Handler, level: int = logging.INFO):
        super().__init__(level)
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        self.target.handle(record)


def route_logs() -> list[str]:
    """Ray's and Ray Data's own log records (the stream's INFO lines, Ray's warnings at start) and
    :data:`FILE_ONLY`'s go to the run's log file, the root logger's file handlers (a Hydra job's
    ``<run>/run.log``), and not to the terminal, where Ray's handlers keep their errors only. Where
    the root logger writes to no file (a script, a test), Ray's handlers stay as they are and
    :data:`FILE_ONLY` goes where the root logger does. Call again after the root's handlers change
    (a new job of a multirun): the previous routes are replaced. Returns the log files."""
    import ray.data  # noqa: F401 (Ray Data sets its logger's handlers on import: this must come after)

    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    for name in (*RAY_LOGGERS, FILE_ONLY.name):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, _Into)]:
            logger.removeHandler(old)
        for into in map(_Into, files):
            logger.addHandler(into)
    FILE_ONLY.propagate = not files
    terminal = [h for name in RAY_LOGGERS for h in logging.getLogger(name).handlers
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
    for h in terminal if files else ():
        h.setLevel(max(h.level, logging.ERROR))
    return [h.baseFilename for h in files]


def announce_isolation(level: str) -> sandbox.Probe:
    """Probe ``eval.isolation`` here and say at start what holds and what does not, in one line (a
    warning where processes or memory are not capped), its long form in the run's log file; a
    level that cannot be had fails the run (ConfigError naming the key), never a weaker one silently."""
    try:
        found = sandbox.probe(sandbox.Isolation(level))
    except sandbox.SandboxUnavailable as exc:
        raise ConfigError(f"eval.isolation: {exc}") from None
    weak = found.level is sandbox.Isolation.NONE or not found.caps_processes or not found.cgroup
    log.log(logging.WARNING if weak else logging.INFO, "%s", isolation_line(found))
    FILE_ONLY.info("isolation: %s", found.describe())
    return found


def isolation_line(found: sandbox.Probe) -> str:
    """The isolation level in one line, what holds and what does not, and where the long form
    (:meth:`sandbox.Probe.describe`) is: the run's log file (without one, the next line)."""
    files = [h.baseFilename for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    where = f"details: {os.path.relpath(files[0])}" if files else "details below"
    if found.level is sandbox.Isolation.NONE:
        return f"isolation: none (plain processes, no sandbox); {where}"
    gaps = ([] if found.caps_processes else ["processes not capped"]) + ([] if found.cgroup else ["no cgroup v2"])
    return f"isolation: sandbox ({found.version or 'bubblewrap'}); {'; '.join([*gaps, where])}"


def node_gpus() -> dict[str, int]:
    """GPUs (logical ones on a CPU machine) of each live node of the Ray cluster."""
    return {n["NodeID"]: int(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n["Alive"]}


def secret_names(environ: Mapping[str, str], also: Iterable[str | None] = ()) -> list[str]:
    """Names in ``environ`` that look like secrets (:func:`pkb_ray.isolation.sandbox.looks_secret`) or are in
    ``also`` (the API key's variable, whatever its name); never ``RAY_*``, Ray's own settings."""
    named = {n for n in also if n}
    return sorted(k for k in environ if not k.startswith("RAY_") and (k in named or sandbox.looks_secret(k)))


@contextmanager
def without_secrets(also: Iterable[str | None] = ()) -> Iterator[list[str]]:
    """Remove :func:`secret_names` from ``os.environ`` for the block (processes started in it, such
    as a local Ray's, inherit none), then put them back; yields the names removed."""
    saved = {k: os.environ.pop(k) for k in secret_names(os.environ, also)}
    try:
        yield sorted(saved)
    finally:
        os.environ.update(saved)


def warn_secrets_in_job_env(api_key_env: str | None) -> list[str]:
    """Warn about secret-looking ``env_vars`` of this job's runtime env: Ray hands them to every worker."""
    env_vars = ray.get_runtime_context().runtime_env.get("env_vars") or {}
    found = secret_names(env_vars, [api_key_env])
    if found:
        log.warning("the job's runtime env sets %s: Ray passes its env_vars to every worker of the job (and its "
                    "job API shows them); give API keys to the driver's own environment instead (docs/cluster.md: API "
                    "keys)", ", ".join(found))
    return found


def _init_ray(cfg: SweepConfig) -> None:
    # log_to_driver=False: what Ray's workers print (Ray's own noise among it) stays in Ray's logs,
    # which the run's log file names, instead of reaching the terminal (and the progress bar)
    if cfg.ray.address:  # its raylets were started elsewhere, with their own environment
        context = ray.init(address=cfg.ray.address, log_to_driver=False)
        _say_where_ray_logs(context)
        warn_secrets_in_job_env(cfg.model.api_key_env)
        return
    left = reaper.clean_up(cfg.cache_path / "runs")  # what a killed driver (and its reaper) left
    if left:
        log.warning("killed %d processes left by an earlier run whose driver was killed", left)
    gpus = local_gpus(cfg)  # None on a GPU machine: Ray counts them
    # "local": a Ray of its own, even where another run's Ray is up (ray.init() would join that one)
    # Ray's head processes inherit os.environ, its workers the raylet's: none of them gets a key
    with without_secrets([cfg.model.api_key_env]):
        context = ray.init(address="local", num_cpus=cfg.ray.num_cpus, num_gpus=gpus,
                           resources=cfg.ray.resources or None, include_dashboard=cfg.ray.include_dashboard,
                           log_to_driver=False)
    _say_where_ray_logs(context)
    _local.settings = local_settings(cfg)
    reaper.start(cfg.cache_path / "runs")  # this local Ray, gangs and ranks die with this process
    if cfg.ray.include_dashboard and getattr(context, "dashboard_url", None):
        print(dashboard_line(context.dashboard_url), file=sys.stderr, flush=True)
        placed = install_grafana_dashboard(Path(context.address_info.get("session_dir", "")))
        if placed:
            print(f"Grafana: the 'pkb_ray run' dashboard is provisioned with Ray's; start Grafana with "
                  f"--config {placed.parent.parent / 'grafana.ini'}", file=sys.stderr, flush=True)


def _say_where_ray_logs(context) -> None:
    session = getattr(context, "address_info", {}).get("session_dir")
    if session:
        FILE_ONLY.info("Ray's own logs, what its workers (gangs, compile actors) print among them: %s on each node",
                       Path(session) / "logs")


def install_grafana_dashboard(session_dir: Path, wait_s: float = 5.0) -> Path | None:
    """Put conf/grafana/pkb_ray_dashboard.json (panels of the ``ray_pkb_*`` metrics) beside the
    dashboards Ray provisions for this session (``<session>/metrics/grafana/dashboards``, written by
    Ray's dashboard process shortly after start). None where Ray wrote none."""
    folder = Path(session_dir) / "metrics" / "grafana" / "dashboards"
    deadline = time.monotonic() + wait_s
    while not folder.is_dir() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not folder.is_dir():
        return None
    target = folder / GRAFANA_DASHBOARD.name
    shutil.copyfile(GRAFANA_DASHBOARD, target)
    return target


def dashboard_line(url: str) -> str:
    """Where the dashboard is, and how to get in (Ray >= 2.59 asks local clusters for a token)."""
    auth = os.environ.get("RAY_AUTH_MODE", "")
    how = ("no token asked (RAY_AUTH_MODE=disabled)" if auth == "disabled" else
           "if it asks for a token, `ray get-auth-token` prints it; on a trusted machine, "
           "RAY_AUTH_MODE=disabled before the run turns it off")
    return f"Ray dashboard: http://{url} ({how})"
