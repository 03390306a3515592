"""``pkb-ray submit [options] [-m] [group=option ...]``: a sweep as a Ray Job on a running cluster.

The job's driver runs in a copy of ``--working-dir`` (this checkout) that Ray unpacks on the head
node and deletes in time, so the run folder (``outputs/...``) is not where results should stay:
``results_dir`` must be durable storage (``s3://bucket/prefix``, ``gs://...``: :mod:`pkb_ray.storage`),
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
  dashboard; the run warns when it finds one there (:func:`pkb_ray.cluster.warn_secrets_in_job_env`).

The job's logs are streamed here until it ends; the exit code is 0 when it succeeded.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pkb_ray.compose import compose_config
from pkb_ray.config import ConfigError, SweepConfig
from pkb_ray.paths import CODE_ROOT
from pkb_ray.storage import FORMS, is_remote

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
EXCLUDES = [".git", ".venv", "outputs", "multirun", "wandb", "**/__pycache__"]  # never uploaded


@dataclass(frozen=True)
class JobSpec:
    """What is submitted: the entrypoint (a shell command) and the job's runtime env."""

    entrypoint: str
    runtime_env: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # said before submitting (the trade-offs taken)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pkb-ray submit", description="a sweep as a Ray Job; its logs until it ends")
    ap.add_argument("--address", default=os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS,
                    help="the cluster's job server (default: RAY_ADDRESS, else %(default)s)")
    ap.add_argument("--working-dir", type=Path, help="shipped to the cluster (default: this checkout)")
    ap.add_argument("--key-file", action="append", default=[], metavar="[NAME=]PATH",
                    help="set NAME (default: model.api_key_env) from a file on the head node, in the driver only")
    ap.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                    help="pass this variable through the job's runtime_env: every worker of the job gets it")
    ap.add_argument("--allow-local-results", action="store_true",
                    help="let results_dir (or generated_dir) be a folder of the job's temporary working dir")
    ap.add_argument("--no-wait", action="store_true", help="submit and return (ray job logs -f <id> follows it)")
    ap.add_argument("-m", "--multirun", action="store_true", help="Hydra's -m: a job per combination")
    ap.add_argument("overrides", nargs="*", help="the sweep's overrides (group=option, key=value)")
    return ap


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


def _ray_group(overrides: Sequence[str]) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") in ("ray", "ray.address") for o in overrides)


def _file_read(path: str) -> str:
    """A shell word that is the contents of ``path`` on the head node (``~/`` is the job user's home)."""
    if path.startswith("~/"):
        return f'"$(cat "$HOME"/{shlex.quote(path[2:])})"'
    return f'"$(cat {shlex.quote(path)})"'


def job_spec(args: argparse.Namespace, cfg: SweepConfig, environ: Mapping[str, str]) -> JobSpec:
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
        notes.append(f"{name} goes into the job's runtime_env: every worker of the job gets it and the job API "
                     "shows it (--key-file keeps it in the driver)")
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
    if errors:
        raise ConfigError("submit: " + "; ".join(errors))
    overrides = list(args.overrides) + ([] if _ray_group(args.overrides) else ["ray=cluster"])  # join, not a new Ray
    command = ["python", "-m", "pkb_ray.sweep", *(["-m"] if args.multirun else []), *overrides]
    runtime_env: dict[str, Any] = {"working_dir": str(working_dir), "excludes": EXCLUDES}
    if env_vars:
        runtime_env["env_vars"] = env_vars
    return JobSpec(" ".join([*prefix, *map(shlex.quote, command)]), runtime_env, notes)


def follow(client: Any, job_id: str) -> int:
    """Print the job's logs as they come until it ends; 0 when it succeeded, else 1."""
    import asyncio

    from ray.job_submission import JobStatus

    async def tail() -> None:
        async for lines in client.tail_job_logs(job_id):
            print(lines, end="", flush=True)

    try:
        asyncio.run(tail())
    except KeyboardInterrupt:
        print(f"\nstopped following; the job goes on (ray job stop {job_id} ends it)", file=sys.stderr)
        return 130
    status = client.get_job_status(job_id)
    print(f"job {job_id}: {status.value}", file=sys.stderr)
    return 0 if status == JobStatus.SUCCEEDED else 1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        cfg = compose_config(first_job(args.overrides), source="config")
        spec = job_spec(args, cfg, os.environ)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for note in spec.notes:
        print(f"note: {note}", file=sys.stderr)
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(args.address)
    job_id = client.submit_job(entrypoint=spec.entrypoint, runtime_env=spec.runtime_env)
    print(f"submitted {job_id} to {args.address}: {spec.entrypoint}", file=sys.stderr)
    if cfg.results_dir and is_remote(cfg.results_dir):
        print(f"results: {cfg.results_dir} (report: pkb-ray report {shlex.quote(cfg.results_dir)})", file=sys.stderr)
    return 0 if args.no_wait else follow(client, job_id)
