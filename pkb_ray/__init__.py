"""pkb_ray: a cluster-scale evaluator for LLM-written multi-GPU kernels (README.md)."""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("pkb_ray")
except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
    __version__ = "0+checkout"

__all__ = ["AsyncRewardClient", "RewardClient", "ServiceError", "__version__", "compose_config", "load_problems",
           "read_results", "run_sweep"]

_HOMES = {"RewardClient": "pkb_ray.serve.client", "AsyncRewardClient": "pkb_ray.serve.client",
          "ServiceError": "pkb_ray.serve.client", "run_sweep": "pkb_ray.api", "read_results": "pkb_ray.results.parquet",
          "load_problems": "pkb_ray.problem", "compose_config": "pkb_ray.spec.compose"}


def __getattr__(name: str):
    """The API's names, each imported on first use (``import pkb_ray`` stays light)."""
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'pkb_ray' has no attribute {name!r}")
