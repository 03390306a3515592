"""pkb_ray: a cluster-scale evaluator for LLM-written multi-GPU kernels (README.md)."""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("pkb_ray")
except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
    __version__ = "0+checkout"

__all__ = ["AsyncRewardClient", "RewardClient", "ServiceError", "__version__"]


def __getattr__(name: str):
    """The serve client, imported on first use (``import pkb_ray`` stays light)."""
    if name in ("RewardClient", "AsyncRewardClient", "ServiceError"):
        from pkb_ray.serve import client

        return getattr(client, name)
    raise AttributeError(f"module 'pkb_ray' has no attribute {name!r}")
