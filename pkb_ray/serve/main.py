"""``pkb-ray serve [group=option ...]``: start the reward service, print where it listens, stop on Ctrl-C.

The config is composed as a sweep's (hardware, eval, problems, ray=local|cluster, and the
``serve`` section); Ray is started or joined as a sweep does it, then Ray Serve runs
:class:`~pkb_ray.serve.app.RewardService` on ``serve.host:serve.port``. Bound to anything but
loopback, every request must carry a bearer token (``serve.token_file``, else ``$serve.token_env``):
without one the command refuses to start. It also refuses (exit 2) a port something listens on
already, and a Ray cluster that runs a pkb_ray service already: Serve's proxy shares a port
(SO_REUSEPORT), so a second service there would silently get half of the first one's requests.
"""

from __future__ import annotations

import faulthandler
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

from pkb_ray.spec.config import ConfigError, EvalConfig, SweepConfig

APP_NAME = "pkb_ray"
READY_TIMEOUT_S = 600.0  # Ray Serve up and a first gang ready (a cluster may scale up for it)
# requests the replica holds at once: beyond serve.max_pending the engine takes requests while
# their expected wait fits their deadline, and each waits in the replica (a coroutine); past this
# limit they would wait in Serve's proxy, where no deadline of ours counts
MAX_ONGOING = 10_000

log = logging.getLogger("pkb_ray")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(cfg: SweepConfig) -> str | None:
    """The bearer token (serve.token_file, else $serve.token_env); ConfigError where one is needed and none is given."""
    s = cfg.serve
    token = None
    if s.token_file:
        path = Path(s.token_file).expanduser()
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"serve.token_file: cannot read {path}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"serve.token_file: {path} is empty")
    token = token or os.environ.get(s.token_env) or None
    if token is None and not is_loopback(s.host):
        raise ConfigError(f"serve.host={s.host} is reachable from other machines: give a bearer token in "
                          f"serve.token_file or ${s.token_env} (or bind to 127.0.0.1)")
    return token


def service_config(overrides: list[str]) -> SweepConfig:
    """The composed config, with the service's folder made absolute (rank sandboxes hide it) and the
    service's timing protocol (:func:`with_protocol`)."""
    from pkb_ray.spec.compose import compose_config

    cfg = compose_config(overrides)  # its errors say "config: ..." after main's "pkb-ray serve: "
    folder = Path(cfg.serve.dir).expanduser().resolve()
    return cfg.model_copy(update={"output_dir": str(folder), "results_dir": cfg.results_dir or str(folder / "results"),
                                  "eval": with_protocol(cfg, overrides)})


def with_protocol(cfg: SweepConfig, overrides: list[str]) -> EvalConfig:
    """eval with serve.protocol's keys, but for those the command line sets itself (``eval.rounds=...``)."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}
    chosen = {k: v for k, v in cfg.serve.protocol.model_dump().items() if v is not None and f"eval.{k}" not in given}
    return cfg.eval.model_copy(update=chosen)


def port_in_use(host: str, port: int) -> str | None:
    """Why nothing new may listen on ``host:port`` here (something listens there already), or None."""
    if port == 0:
        return None
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        return f"{host}: {exc.strerror}"
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR: a closed connection's TIME_WAIT does not count. No SO_REUSEPORT (which Serve's
        # proxy sets): with a listener there, the bind fails instead of sharing the port with it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.strerror or repr(exc)
    return None


def taken(cfg: SweepConfig, why: str) -> ConfigError:
    return ConfigError(f"serve.port: {cfg.serve.host}:{cfg.serve.port} is in use ({why}): another service (another "
                       f"pkb-ray serve?) listens there; stop it or choose another serve.port")


def join(cfg: SweepConfig) -> None:
    """Start or join Ray as a sweep does, then make sure the service can be the only one on its port
    and cluster (ConfigError otherwise; nothing of the service is started yet)."""
    import ray
    from ray import serve
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from pkb_ray.pipeline.cluster import check_start, join_or_start

    check_start(cfg)
    join_or_start(cfg)
    running = serve.status().applications
    if APP_NAME in running:
        raise ConfigError(f"a pkb_ray service runs on this Ray cluster already (Serve application {APP_NAME!r}, "
                          f"{running[APP_NAME].status.value}): one a cluster; stop it first (Ctrl-C in its "
                          f"terminal, or `serve shutdown`)")
    if cfg.ray.address:  # the proxy listens on the head node, which may be another machine: ask there
        head = next((n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"]),
                    None)
        check = ray.remote(num_cpus=0)(port_in_use)
        if head is not None:
            check = check.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False))
        try:
            why = ray.get(check.remote(cfg.serve.host, cfg.serve.port), timeout=120)
        except Exception as exc:  # noqa: BLE001 - no answer from the head: Serve's own start says what it finds
            log.warning("serve: could not check serve.port on the head node: %r", exc)
            why = None
    else:  # a local Ray: main() asked before starting it; ask again, it took a while
        why = port_in_use(cfg.serve.host, cfg.serve.port)
    if why:
        raise taken(cfg, why)


def start(cfg: SweepConfig, token: str | None) -> str:
    """Start Ray Serve with the service on it (after :func:`join`); returns its URL."""
    from ray import serve

    from pkb_ray.serve.app import RewardService

    # one proxy, on the head (the URL printed): on a machine running several Ray nodes, as tests do,
    # proxies on every node would contend for the one port
    serve.start(proxy_location="HeadOnly", http_options={"host": cfg.serve.host, "port": cfg.serve.port},
                logging_config={"log_level": "WARNING", "enable_access_log": False})
    # a stop waits for requests in flight only briefly (Serve's default is 20 s): they wait on
    # evaluations, which the engine abandons when it closes (their callers get an error)
    deployment = RewardService.options(max_ongoing_requests=max(MAX_ONGOING, 4 * cfg.serve.max_pending),
                                       max_queued_requests=-1, graceful_shutdown_timeout_s=2.0)
    app = deployment.bind(cfg.model_dump(mode="json"), token)
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    shown = "127.0.0.1" if cfg.serve.host in ("0.0.0.0", "::") else cfg.serve.host
    return f"http://{shown}:{cfg.serve.port}"


def wait_ready(url: str, timeout_s: float = READY_TIMEOUT_S, say_every_s: float = 30.0) -> dict:
    """/healthz once a gang is ready (its figures). Says every ``say_every_s`` what it waits on;
    RuntimeError with Serve's own message if the application fails to deploy, or at the timeout."""
    start = last_said = time.monotonic()
    last = "no answer"
    while time.monotonic() - start < timeout_s:
        failed = deploy_failure()
        if failed:
            raise RuntimeError(f"the service failed to start: {failed}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=5) as reply:
                health = json.loads(reply.read())
            if health.get("gangs_ready"):
                return health
            last = f"gangs {health.get('gangs') or 'not planned yet'}"
        except OSError as exc:
            last = f"{url}/healthz: {exc}"
        if time.monotonic() - last_said >= say_every_s:
            last_said = time.monotonic()
            print(f"pkb_ray serve: starting ({time.monotonic() - start:.0f} s): {last}", file=sys.stderr, flush=True)
        time.sleep(0.5)
    raise RuntimeError(f"the service did not become ready within {timeout_s:g} s ({last})")


def deploy_failure() -> str:
    """Serve's message where the application or its deployment failed ("" while it deploys or runs)."""
    from ray import serve

    app = serve.status().applications.get(APP_NAME)
    if app is None:
        return ""
    bad = [f"{name}: {d.message}" for name, d in app.deployments.items()
           if d.status.value in ("DEPLOY_FAILED", "UNHEALTHY") and d.message]
    if app.status.value in ("DEPLOY_FAILED", "UNHEALTHY") or bad:
        return "; ".join(bad) or app.message or app.status.value
    return ""


def stop(serving: bool = True) -> None:
    """Delete the application and shut Serve down (``serving``: this process started them), then
    the local Ray it started."""
    from ray import serve

    from pkb_ray.pipeline.cluster import end_job

    try:
        if serving:
            serve.delete(APP_NAME)  # the replica closes its engine: gangs and placement groups go back
            serve.shutdown()
    except Exception as exc:  # noqa: BLE001 - Serve never started (Ray did not): nothing to stop there
        log.debug("serve: %s", exc)
    finally:
        end_job(keep=False)


def main(overrides: list[str]) -> int:
    """``pkb-ray serve`` on its overrides (pkb_ray/cli.py declares its command line and help)."""
    try:
        cfg = service_config(overrides)
        token = read_token(cfg)
        if not cfg.ray.address and (why := port_in_use(cfg.serve.host, cfg.serve.port)):
            raise taken(cfg, why)  # the head is this machine: said before Ray starts
    except ConfigError as exc:
        print(f"pkb-ray serve: {exc}", file=sys.stderr)
        return 2
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: every thread's stack
    stopping = threading.Event()
    serving = False  # Serve and the application are this process's to stop
    try:
        join(cfg)
        serving = True
        url = start(cfg, token)
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())  # after Ray's start, which sets its own
        health = wait_ready(url)
        print(f"pkb_ray serve: {url} (API docs: {url}/docs; results: {cfg.results_dir}; "
              f"{health['gangs_ready']} gang(s) ready; {health['cached_verdicts']} stored verdicts). Ctrl-C stops it.",
              flush=True)
        while not stopping.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    except (ConfigError, RuntimeError) as exc:
        print(f"pkb-ray serve: {exc}", file=sys.stderr)
        return 2
    finally:
        if serving:
            print("pkb_ray serve: stopping", file=sys.stderr, flush=True)
        began = time.monotonic()
        stop(serving)
        if serving:
            print(f"pkb_ray serve: stopped in {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)
    return 0
