"""``pkb-ray submit [options] [-m] [group=option ...]``: a sweep as a Ray Job on a running cluster.

The job's driver runs in a copy of ``--working-dir`` (this checkout) that Ray unpacks on the head
node and deletes in time, so the run folder (``outputs/...``) is not where results should stay:
``results_dir`` must be durable storage (``s3://bucket/prefix``, ``gs://...``: :mod:`pkb_ray.results.storage`),
and ``generated_dir`` too for a generating model, unless ``--allow-local-results``. The report is
then copied beside the results (``<results_dir>/_report/``), so ``pkb-ray report <results_dir>``
and the bucket hold everything.

Secrets (the model's API key, ``model.api_key_env``; ``WANDB_API_KEY``) reach the job only as
asked, in one of two ways:

- ``--key-file [NAME=]PATH``: the entrypoint reads the file on the head node when the job starts
  (``NAME="$(cat PATH)" python -m pkb_ray.sweep ...``). The key lives in the driver's process only:
  Ray's workers are started by the raylets, not by the driver, and the job API shows the command,
  not the key. The file must be put on the head node beforehand (e.g. by the cluster's setup).
- ``--pass-env NAME``: the value here goes into the job's ``runtime_env`` ``env_vars``. Easy, but
  Ray hands those to every worker process of the job (gang and compile actors; rank processes get
  an allowlisted environment without it) and shows them to anyone who can read the job API or the
  dashboard; the run warns when it finds one there (:func:`pkb_ray.pipeline.cluster.warn_secrets_in_job_env`).

The entrypoint runs ``python`` as the head node's PATH finds it (``--python`` names another): start
the head's Ray from the environment pkb_ray's dependencies are installed in (its ``bin/`` first on
PATH), or the job fails at its first import.

A cluster that asks for a token (Ray >= 2.59: ``ray start`` turns token auth on where
``~/.ray/auth_token`` exists, and a local ``ray.init()``, any local sweep, writes one): give it as
Ray's own clients take it (``RAY_AUTH_MODE=token`` with ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``,
what ``ray get-auth-token`` prints on the head). For a job server on this machine (a loopback
address) with ``RAY_AUTH_MODE`` unset, the token found here is sent without asking, as
``ray.init()`` does for a local cluster; Ray's own ``ray job`` CLI wants ``RAY_AUTH_MODE=token``.

The job's logs are streamed here until it ends (a dropped connection is picked up again where it
stopped); ``--no-wait`` returns once it is sent, ``--follow ID`` follows it later. Exit codes: 0 the
job succeeded; 1 it failed or was stopped (its status message is said); 2 nothing was submitted or
followed (a bad command line, no job server, a token refused, no such job); 130 Ctrl-C: this stops
following, the job goes on.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pkb_ray.isolation.sandbox import looks_secret
from pkb_ray.results.storage import FORMS, is_remote
from pkb_ray.spec.compose import compose_config
from pkb_ray.spec.config import ConfigError, SweepConfig
from pkb_ray.spec.paths import CODE_ROOT

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
EXCLUDES = [".git", ".venv", "**/__pycache__"]  # never uploaded
# where git cannot say what a working dir ignores: its run folders (anchored: conf/wandb/ is config)
NOT_GIT = ["/outputs", "/multirun", "/wandb"]
LOOPBACK = ("127.0.0.1", "localhost", "::1")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")  # JobStatus values a job does not leave


@dataclass(frozen=True)
class JobSpec:
    """What is submitted: the entrypoint (a shell command) and the job's runtime env."""

    entrypoint: str
    runtime_env: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # said before submitting (the trade-offs taken)


@dataclass(frozen=True)
class SubmitArgs:
    """``pkb-ray submit``'s command line, parsed (pkb_ray/cli.py declares and documents it)."""

    overrides: Sequence[str] = ()  # the sweep's overrides (group=option, key=value)
    address: str = DEFAULT_ADDRESS  # the cluster's job server
    working_dir: Path | None = None  # shipped to the cluster (None: this checkout)
    python: str = "python"  # the head node's interpreter
    key_file: Sequence[str] = ()  # [NAME=]PATH: NAME from a file on the head node, in the driver only
    pass_env: Sequence[str] = ()  # variables passed through the job's runtime_env
    allow_local_results: bool = False
    no_wait: bool = False
    follow: str | None = None  # a job submitted before
    multirun: bool = False  # Hydra's -m


def first_job(overrides: Sequence[str]) -> list[str]:
    """The overrides of a sweep's first job (each swept value's first), for checking it here."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = []
    for text, o in zip(overrides, OverridesParser.create().parse_overrides(list(overrides))):
        if o.is_sweep_override():
            text = f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
        out.append(text)
    return out


def durable_errors(cfg: SweepConfig) -> list[str]:
    """Why the job's results (or generated samples) would stay in its temporary working dir."""
    folders = {"results_dir": cfg.results_dir}
    if cfg.model.provider != "replay":
        folders["generated_dir"] = cfg.generated_dir
    return [f"{key}: {value or '<output_dir>/' + key.removesuffix('_dir')} is a folder of the job's working dir, "
            f"a temporary copy on the head node; give durable storage ({key}=s3://bucket/prefix; {FORMS}), "
            "or --allow-local-results" for key, value in folders.items() if not value or not is_remote(value)]


def excludes(working_dir: Path) -> list[str]:
    """What of ``working_dir`` is not shipped: what git ignores in it (untracked and ignored, each
    anchored), or :data:`NOT_GIT` where it is no git work tree. Ray's own reading of ``.gitignore``
    is turned off while sending (:func:`_git_semantics`): it drops tracked files too (the checkout's
    ``wandb/`` line takes ``conf/wandb/``, and the job fails composing its config)."""
    try:
        out = subprocess.run(["git", "-C", str(working_dir), "ls-files", "-z", "--others", "--ignored",
                              "--exclude-standard", "--directory"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return [*EXCLUDES, *NOT_GIT]
    ignored = ["/" + re.sub(r"([\\\[\]*?!#])", r"\\\1", p.rstrip("/")) for p in out.split("\0") if p]
    return [*EXCLUDES, *ignored]


@contextmanager
def _git_semantics() -> Iterator[None]:
    """Ray's packaging without its reading of ``.gitignore`` files (:func:`excludes` says what git ignores)."""
    name, saved = "RAY_RUNTIME_ENV_IGNORE_GITIGNORE", os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE")
    os.environ[name] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def _ray_group(overrides: Sequence[str]) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") in ("ray", "ray.address") for o in overrides)


def _file_read(path: str) -> str:
    """A shell word that is the contents of ``path`` on the head node (``~/`` is the job user's home)."""
    if path.startswith("~/"):
        return f'"$(cat "$HOME"/{shlex.quote(path[2:])})"'
    return f'"$(cat {shlex.quote(path)})"'


def job_spec(args: SubmitArgs, cfg: SweepConfig, environ: Mapping[str, str]) -> JobSpec:
    """The entrypoint and runtime env of ``args`` (``cfg``: the first job, composed here); ConfigError
    for what would fail on the cluster or lose the results."""
    errors = [] if args.allow_local_results else durable_errors(cfg)
    working_dir = args.working_dir or (CODE_ROOT if (CODE_ROOT / "conf" / "config.yaml").is_file() else None)
    if working_dir is None:  # an installed wheel: its folder is site-packages
        errors.append("--working-dir: pkb_ray is not run from a checkout here: name the folder to ship")
    env_vars, notes, prefix = {}, [], []
    for name in args.pass_env:
        if name not in environ:
            errors.append(f"--pass-env {name}: not set here")
            continue
        env_vars[name] = environ[name]
    secrets = [n for n in env_vars if looks_secret(n) or n == cfg.model.api_key_env]
    if secrets:
        notes.append(f"{', '.join(secrets)} into the job's runtime_env: every worker of the job gets "
                     f"{'it' if len(secrets) == 1 else 'them'} and the job API shows "
                     f"{'it' if len(secrets) == 1 else 'them'} (--key-file keeps a key in the driver)")
    for item in args.key_file:
        name, sep, path = item.partition("=")
        name, path = (name, path) if sep else (cfg.model.api_key_env, item)
        if not name or not path:
            errors.append(f"--key-file {item}: give NAME=PATH (model.api_key_env is not set)")
            continue
        prefix.append(f"{name}={_file_read(path)}")
    key = cfg.model.api_key_env
    given = set(env_vars) | {p.split("=", 1)[0] for p in prefix}
    if cfg.model.provider != "replay" and key and key not in given:
        notes.append(f"model.api_key_env {key} is given neither by --key-file nor --pass-env: the job fails at start "
                     "unless the head node's Ray has it")
    if cfg.wandb.mode == "offline":
        notes.append("wandb=offline: the W&B run's files stay in the job's temporary working dir on the head "
                     "node; wandb=online (WANDB_API_KEY: --key-file WANDB_API_KEY=PATH) keeps them, wandb=disabled "
                     "skips them")
    elif cfg.wandb.mode == "online" and "WANDB_API_KEY" not in given:
        notes.append("wandb=online: WANDB_API_KEY is given neither by --key-file nor --pass-env: the job needs the "
                     "head node's own W&B login")
    if errors:
        raise ConfigError("submit: " + "; ".join(errors))
    overrides = list(args.overrides) + ([] if _ray_group(args.overrides) else ["ray=cluster"])  # join, not a new Ray
    command = [args.python, "-m", "pkb_ray.sweep", *(["-m"] if args.multirun else []), *overrides]
    runtime_env: dict[str, Any] = {"working_dir": str(working_dir), "excludes": excludes(Path(working_dir))}
    if env_vars:
        runtime_env["env_vars"] = env_vars
    return JobSpec(" ".join([*prefix, *map(shlex.quote, command)]), runtime_env, notes)


def auth_headers(address: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The token header for a job server on this machine when ``RAY_AUTH_MODE`` is unset: the token
    of ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token`` (``ray start`` wrote it).
    Else none: Ray's client adds its own where ``RAY_AUTH_MODE=token``, and a remote server gets a
    token only when the user asks for it so."""
    if "RAY_AUTH_MODE" in environ or urllib.parse.urlsplit(address).hostname not in LOOPBACK:
        return {}
    token = environ.get("RAY_AUTH_TOKEN", "").strip()
    if not token:
        path = Path(environ.get("RAY_AUTH_TOKEN_PATH") or Path(environ.get("HOME", "~")) / ".ray" / "auth_token")
        try:
            token = path.expanduser().read_text().strip()
        except OSError:
            return {}
    return {"Authorization": f"Bearer {token}"} if token else {}


class _Quiet(logging.Filter):
    """Ray's INFO lines while a job is sent and followed (packaging, uploads, the log socket's close),
    and its warning about folders it leaves out by default (this command leaves them out too)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING and "ignored by default" not in str(record.msg)


def _ray_cli(address: str, headers: Mapping[str, str]) -> str:
    """``ray job ...`` as the user would type it for this server."""
    return ("RAY_AUTH_MODE=token " if headers else "") + f"ray job {{}} --address {shlex.quote(address)}"


class _LogFollower:
    """Prints a job's log stream by stream: each stream starts at the log's beginning, so one taken up
    again after a drop skips the text already printed."""

    def __init__(self, client: Any, job_id: str, out: Any):
        self.client, self.job_id, self.out = client, job_id, out
        self.printed = 0  # characters printed
        self.tail = ""  # the end of them (for a hint on failure)

    async def stream(self) -> None:
        """One stream of the log, until it ends: what it brings beyond what was printed, printed."""
        seen = 0
        async for chunk in self.client.tail_job_logs(self.job_id):  # from the log's start, each time
            new = chunk[max(0, self.printed - seen):]
            seen += len(chunk)
            if new:
                self.out.write(new)
                self.out.flush()
                self.printed += len(new)
                self.tail = (self.tail + new)[-4000:]


def follow(client: Any, job_id: str, out: Any = None, retries: int = 5, wait_s: float = 2.0,
           again: str = "pkb-ray submit --follow ID", stop: str = "ray job stop ID") -> int:
    """Print the job's logs as they come until it ends; 0 when it succeeded, else 1 (its status and
    message said); 130 on Ctrl-C, the job going on. A stream that ends while the job runs (a dropped
    socket, a restarted dashboard) is taken up again, the text already printed skipped; after
    ``retries`` such ends in a row with nothing new, this gives up (1, saying how to follow)."""
    import asyncio

    import aiohttp

    log = _LogFollower(client, job_id, out or sys.stdout)
    failures = 0
    try:
        while True:
            before, error = log.printed, None
            try:
                asyncio.run(log.stream())
            except (RuntimeError, OSError, asyncio.TimeoutError, aiohttp.ClientError) as exc:
                error = exc
            status = _status(client, job_id)
            deadline = time.monotonic() + (0 if error else 5)  # a job's status follows its log's end closely
            while status not in TERMINAL and time.monotonic() < deadline:
                time.sleep(0.2)
                status = _status(client, job_id)
            if status in TERMINAL:
                break
            failures = failures + 1 if log.printed == before else 1
            why = f"lost the job's logs ({error or 'the stream ended'}); it is {status or 'unknown'}"
            if failures > retries:
                print(f"\n{why}: {again} follows it", file=sys.stderr)
                return 1
            print(f"\n{why}: following again in {wait_s:g} s", file=sys.stderr)
            time.sleep(wait_s)
    except KeyboardInterrupt:
        print(f"\nstopped following; the job goes on ({again} follows it again, {stop} ends it)",
              file=sys.stderr)
        return 130
    return _say_end(client, job_id, status, log.tail)


def _say_end(client: Any, job_id: str, status: str, tail: str) -> int:
    """How the job ended, said: 0 when it succeeded, else 1 (with its message, and a hint where the
    end of its log shows the head node's python cannot run pkb_ray)."""
    if status == "SUCCEEDED":
        print(f"job {job_id}: SUCCEEDED", file=sys.stderr)
        return 0
    message = ""
    try:
        message = (client.get_job_info(job_id).message or "").split(", last available logs")[0]
    except Exception:  # noqa: BLE001 - the message is a courtesy; the status decides
        pass
    print(f"job {job_id}: {status}" + (f": {message}" if message else ""), file=sys.stderr)
    if "No module named" in tail or ": not found" in tail:
        print("hint: the head node's python is missing or lacks pkb_ray's dependencies: start its Ray from the "
              "environment they are installed in (its bin/ first on PATH), or give --python /path/to/that/python",
              file=sys.stderr)
    return 1


def room_warnings(cfg: SweepConfig, address: str, headers: Mapping[str, str]) -> list[str]:
    """What the cluster at ``address`` lacks for ``cfg``'s gangs now (the run's own check, made
    before sending: a CPU-only head started without ``--num-gpus`` has no GPU for a gang); empty
    when it has room or its nodes cannot be listed (the job checks again where it runs)."""
    from ray.util.state import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource

    from pkb_ray.pipeline.cluster import room_problems

    try:
        nodes = StateApiClient(address=address, headers=dict(headers) or None).list(
            StateResource.NODES, options=ListApiOptions(detail=True), raise_on_missing_output=False)
    except Exception:  # noqa: BLE001 - a courtesy: an old or locked-down dashboard lists nothing
        return []
    gpus = {n.node_id: int((n.resources_total or {}).get("GPU", 0)) for n in nodes if n.state == "ALIVE"}
    return room_problems(cfg, gpus) if gpus else []


def _status(client: Any, job_id: str) -> str | None:
    try:
        return str(getattr(client.get_job_status(job_id), "value", None) or "") or None
    except Exception:  # noqa: BLE001 - the server is away: unknown
        return None


def main(args: SubmitArgs) -> int:
    """``pkb-ray submit``: see the module's docstring for what it does and its exit statuses."""
    cfg = spec = None
    if args.follow and args.overrides:
        print(f"error: --follow {args.follow} takes no overrides (the job has its own)", file=sys.stderr)
        return 2
    if not args.follow:
        try:
            cfg = compose_config(first_job(args.overrides), source="config")
            spec = job_spec(args, cfg, os.environ)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for note in spec.notes:
            print(f"note: {note}", file=sys.stderr)
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    for handler in logging.getLogger("ray").handlers:  # Ray's own handler: its children's records pass it
        if not any(isinstance(f, _Quiet) for f in handler.filters):
            handler.addFilter(_Quiet())
    headers = auth_headers(args.address, os.environ)
    try:
        client = JobSubmissionClient(args.address, headers=headers or None)
        if spec is None:
            job_id = args.follow
            client.get_job_status(job_id)  # RuntimeError where there is no such job
        else:
            for why in room_warnings(cfg, args.address, headers):
                print(f"warning: {why}; the job will fail there unless the cluster grows", file=sys.stderr)
            print(f"sending {spec.runtime_env['working_dir']} to {args.address}", file=sys.stderr, flush=True)
            with _git_semantics():
                job_id = client.submit_job(entrypoint=spec.entrypoint, runtime_env=spec.runtime_env)
    except AuthenticationError as exc:
        print(f"error: {args.address} asks for a token{' (the one sent was refused)' if headers else ''}: set "
              "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to what `ray get-auth-token` prints "
              f"on the head node ({str(exc).splitlines()[0]})", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(f"error: no Ray job server at {args.address} ({exc}); give --address http://HEAD:8265 "
              "(the head's dashboard port) or RAY_ADDRESS", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # the job server's refusal (a bad runtime env, no such job)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nnothing submitted", file=sys.stderr)
        return 130
    again = f"pkb-ray submit --address {shlex.quote(args.address)} --follow {job_id}"
    stop = _ray_cli(args.address, headers).format("stop") + f" {job_id}"
    if spec is not None:
        print(f"submitted {job_id}: {spec.entrypoint}", file=sys.stderr)
    print(f"  dashboard: {args.address.rstrip('/')}/#/jobs/{job_id}", file=sys.stderr)
    if cfg is not None and cfg.results_dir and is_remote(cfg.results_dir):
        print(f"  results: {cfg.results_dir} (report: pkb-ray report {shlex.quote(cfg.results_dir)})", file=sys.stderr)
    if args.no_wait:
        print(f"  follow: {again}\n  stop: {stop}", file=sys.stderr)
        return 0
    return follow(client, job_id, again=again, stop=stop)
