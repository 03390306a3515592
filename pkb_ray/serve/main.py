"""``pkb-ray serve [group=option ...]``: start the reward service, print where it listens, stop on Ctrl-C.

The config is composed as a sweep's (hardware, eval, problems, ray=local|cluster, and the
``serve`` section); Ray is started or joined as a sweep does it, then Ray Serve runs
:class:`~pkb_ray.serve.app.RewardService` on ``serve.host:serve.port``. Bound to anything but
loopback, every request must carry a bearer token (``serve.token_file``, else ``$serve.token_env``):
without one the command refuses to start.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

from pkb_ray.spec.config import ConfigError, EvalConfig, SweepConfig

APP_NAME = "pkb_ray"
READY_TIMEOUT_S = 600.0  # Ray Serve up and a first gang ready (a cluster may scale up for it)

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

    cfg = compose_config(overrides, source="pkb-ray serve")
    folder = Path(cfg.serve.dir).expanduser().resolve()
    return cfg.model_copy(update={"output_dir": str(folder), "results_dir": cfg.results_dir or str(folder / "results"),
                                  "eval": with_protocol(cfg, overrides)})


def with_protocol(cfg: SweepConfig, overrides: list[str]) -> EvalConfig:
    """eval with serve.protocol's keys, but for those the command line sets itself (``eval.rounds=...``)."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}
    chosen = {k: v for k, v in cfg.serve.protocol.model_dump().items() if v is not None and f"eval.{k}" not in given}
    return cfg.eval.model_copy(update=chosen)


def start(cfg: SweepConfig, token: str | None) -> str:
    """Start Ray Serve with the service on it; returns its URL."""
    from ray import serve

    from pkb_ray.pipeline.cluster import check_start, join_or_start
    from pkb_ray.serve.app import RewardService

    check_start(cfg)
    join_or_start(cfg)
    # one proxy, on the head (the URL printed): on a machine running several Ray nodes, as tests do,
    # proxies on every node would contend for the one port
    serve.start(proxy_location="HeadOnly", http_options={"host": cfg.serve.host, "port": cfg.serve.port},
                logging_config={"log_level": "WARNING", "enable_access_log": False})
    app = RewardService.options(max_ongoing_requests=2 * cfg.serve.max_pending + 64,
                                max_queued_requests=-1).bind(cfg.model_dump(mode="json"), token)
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


def stop() -> None:
    from ray import serve

    from pkb_ray.pipeline.cluster import end_job

    try:
        serve.delete(APP_NAME)  # the replica closes its engine: gangs and placement groups go back
        serve.shutdown()
    except Exception as exc:  # noqa: BLE001 - Serve never started (Ray did not): nothing to stop there
        log.debug("serve: %s", exc)
    finally:
        end_job(keep=False)


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\nkeys: pkb-ray help config (the serve.* keys); API: docs/serve.md")
        return 0
    try:
        cfg = service_config(argv)
        token = read_token(cfg)
    except ConfigError as exc:
        print(f"pkb-ray serve: {exc}", file=sys.stderr)
        return 2
    stopping = threading.Event()
    try:
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
        print("pkb_ray serve: stopping", file=sys.stderr, flush=True)
        stop()
    return 0
