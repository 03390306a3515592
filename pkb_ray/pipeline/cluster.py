"""Starting or joining Ray for a run, and saying at start what the run will get.

:func:`start_ray` joins the cluster of ``ray.address`` or starts a local one (logical GPUs on a
CPU machine, so that gangs of gloo ranks are placed like GPU gangs), says where the dashboard is
and how to open it, and checks that the cluster can hold a gang of every layout the run needs.
:func:`announce_isolation` probes the sandbox level before anything starts. A local Ray dies with
its driver, however the driver ends (:mod:`pkb_ray.isolation.reaper`). API keys stay in the driver: a local
Ray starts without them (:func:`without_secrets`), so no worker, actor or job of it can read one.

One line Ray itself prints at start is expected: ``E ... core_worker.cc ... Actor with class name:
'MapWorker(MapBatches(BuildCuda))' ... has constructor arguments in the object store and
max_restarts > 0``. Ray Data keeps the compile actors' constructor arguments (the build settings)
in the object store for the whole run, so a restarted compile actor finds them.
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


def announce_isolation(level: str) -> sandbox.Probe:
    """Probe ``eval.isolation`` here and say at start what holds and what does not; a level that
    cannot be had fails the run (ConfigError naming the key), never a weaker one silently."""
    try:
        found = sandbox.probe(sandbox.Isolation(level))
    except sandbox.SandboxUnavailable as exc:
        raise ConfigError(f"eval.isolation: {exc}") from None
    line = f"isolation: {found.describe()}"
    weak = found.level is sandbox.Isolation.NONE or not found.caps_processes or not found.cgroup
    if weak:  # once, through the log (a run's logging writes it to the terminal and its log file)
        log.warning("%s", line)
    else:
        print(line, file=sys.stderr, flush=True)
    return found


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
    if cfg.ray.address:  # its raylets were started elsewhere, with their own environment
        ray.init(address=cfg.ray.address)
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
                           log_to_driver=True, configure_logging=False)
    _local.settings = local_settings(cfg)
    reaper.start(cfg.cache_path / "runs")  # this local Ray, gangs and ranks die with this process
    if cfg.ray.include_dashboard and getattr(context, "dashboard_url", None):
        print(dashboard_line(context.dashboard_url), file=sys.stderr, flush=True)
        placed = install_grafana_dashboard(Path(context.address_info.get("session_dir", "")))
        if placed:
            print(f"Grafana: the 'pkb_ray run' dashboard is provisioned with Ray's; start Grafana with "
                  f"--config {placed.parent.parent / 'grafana.ini'}", file=sys.stderr, flush=True)


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
