"""What every Hydra entry point does around its job (``pkb_ray.sweep``, ``pkb_ray.baselines``):
log setup, SIGTERM as an exit that unwinds (so results waiting to be written are written), the
config validated at start, a bad config, problem or sample file as one ``error:`` line and exit
status 2, and the Ray it started shut down at the end.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Callable

import hydra
import ray
from omegaconf import DictConfig, OmegaConf

from pkb_ray.config import ConfigError, SweepConfig, validate_config
from pkb_ray.llm import GenerationError
from pkb_ray.paths import CONF_DIR
from pkb_ray.problem import ProblemError

USER_ERRORS = (ConfigError, ProblemError, FileNotFoundError, GenerationError)


def _stop(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


def run_job(raw: DictConfig, job: Callable[[SweepConfig], object]) -> None:
    """Validate Hydra's composed config and run ``job`` on it, as described above."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    signal.signal(signal.SIGTERM, _stop)
    try:
        job(validate_config(OmegaConf.to_container(raw, resolve=True), source="config"))
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    finally:
        if ray.is_initialized() and not raw.get("ray", {}).get("address"):  # ours, not a cluster we joined
            ray.shutdown()


def hydra_main(job: Callable[[SweepConfig], object]) -> Callable[[], None]:
    """The ``main()`` of an entry point: Hydra composes conf/config.yaml with the command line's
    overrides (``-m`` for a sweep), then :func:`run_job` runs ``job`` on the validated config."""

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
    def main(raw: DictConfig) -> None:
        run_job(raw, job)

    return main
