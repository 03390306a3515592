"""What every Hydra entry point does around its job (``pkb_ray.sweep``, ``pkb_ray.baselines``):
log setup, SIGTERM as an exit that unwinds (so results waiting to be written are written), the
config validated at start (every mistake of the command line in one message, before Hydra stops at
the first: :mod:`pkb_ray.spec.compose`), a bad config, problem or sample file as one ``error:`` line and
exit status 2, ``--help`` as the config keys with their descriptions, and the Ray it started shut
down at the end (at the process's end under ``-m``, where the next job uses it again).
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from typing import Callable

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from pkb_ray.generate.llm import GenerationError
from pkb_ray.pipeline.cluster import end_job
from pkb_ray.problem import ProblemError
from pkb_ray.spec import compose
from pkb_ray.spec.config import ConfigError, SweepConfig, validate_config
from pkb_ray.spec.paths import CONF_DIR

USER_ERRORS = (ConfigError, ProblemError, FileNotFoundError, GenerationError)


def _stop(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


def run_job(raw: DictConfig, job: Callable[[SweepConfig], object]) -> None:
    """Validate Hydra's composed config and run ``job`` on it, as described above."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    signal.signal(signal.SIGTERM, _stop)
    try:
        hc = HydraConfig.get()  # the group choices name each key's file; those the command line made are explicit
        choices = {k: v for k, v in hc.runtime.choices.items() if not k.startswith("hydra/")}
        job(validate_config(OmegaConf.to_container(raw, resolve=True), source="config", choices=choices,
                            explicit=compose.explicit_groups(hc.overrides.task)))
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    finally:  # the local Ray it started: kept for a multirun's next job, which will likely want it
        end_job(keep=HydraConfig.get().mode == RunMode.MULTIRUN)


def hydra_main(job: Callable[[SweepConfig], object]) -> Callable[[], None]:
    """The ``main()`` of an entry point: Hydra composes conf/config.yaml with the command line's
    overrides (``-m`` for a sweep), then :func:`run_job` runs ``job`` on the validated config."""

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
    def hydra_job(raw: DictConfig) -> None:
        run_job(raw, job)

    def main() -> None:
        argv = sys.argv[1:]
        if any(a in ("-h", "--help") for a in argv):  # the keys and their descriptions (--hydra-help: Hydra's)
            prog = f"python -m pkb_ray.{Path(sys.argv[0]).stem}" if sys.argv[0].endswith(".py") else sys.argv[0]
            print(f"usage: {prog} [-m] [group=option ...] [key=value ...]\n\nconfig groups:\n"
                  f"{compose.groups_help()}\n\n{compose.keys_help()}")
            return
        errors = compose.precheck(argv)  # Hydra would stop at the first unknown option or key
        if errors:
            print(f"error: {errors}", file=sys.stderr)
            sys.exit(2)
        hydra_job()

    return main
