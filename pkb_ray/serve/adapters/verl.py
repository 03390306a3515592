"""verl's custom reward function, answered by ``pkb-ray serve``.

In a verl PPO/GRPO config::

    reward:                      # verl 0.9 (before it: custom_reward_function at the top level)
      custom_reward_function:
        path: <site-packages>/pkb_ray/serve/adapters/verl.py   # python -c "import pkb_ray.serve.adapters.verl as m; print(m.__file__)"
        name: compute_score
        reward_kwargs: {url: "http://127.0.0.1:8000"}          # or $PKB_RAY_SERVE_URL

Each row's ``ground_truth`` (``reward_model.ground_truth``) is the problem id (``all_reduce``, or
``all_reduce:cuda`` for another backend); ``extra_info`` may carry ``problem_id``, ``backend`` and
``sample_id``. verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` per
response and takes the ``score`` of the dict returned; the other keys (all numbers or strings, the
same for every row) go to its reward_extra_info and its logs. ``compute_score_batch`` is the same
for verl's batch reward manager (lists in, a list out, one request for the whole batch).
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from pkb_ray.serve.adapters.labels import item, no_code
from pkb_ray.serve.client import RewardClient, ServiceError

URL_ENV = "PKB_RAY_SERVE_URL"


@lru_cache(maxsize=8)
def _client(url: str | None, token: str | None) -> RewardClient:
    return RewardClient(url or os.environ.get(URL_ENV, "http://127.0.0.1:8000"), token=token)


def _scored(verdict: dict[str, Any]) -> dict[str, Any]:
    """verl's shape: ``score`` and flat extras of fixed types (NaN-free: -1.0 where unknown)."""
    speedup = verdict.get("speedup")
    return {"score": float(verdict.get("reward") or 0.0), "correct": float(bool(verdict.get("correct"))),
            "speedup": float(speedup) if speedup is not None else -1.0, "status": str(verdict.get("status")),
            "feedback": str(verdict.get("feedback") or verdict.get("error") or "")}


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  url: str | None = None, token: str | None = None, **_: Any) -> dict[str, Any]:
    """The reward of one response (verl's custom reward function signature)."""
    found, why = item(solution_str, ground_truth, extra_info)
    if found is None:
        return _scored(no_code(why))
    try:
        return _scored(_client(url, token).verify(**found))
    except ServiceError as exc:  # a refused item scores as a failure, with the service's reason
        return _scored({"status": "service_error", "reward": 0.0, "error": str(exc)})


def compute_score_batch(data_sources: list, solution_strs: list[str], ground_truths: list, extra_infos: list,
                        url: str | None = None, token: str | None = None, **_: Any) -> list[dict[str, Any]]:
    """Every response of a batch in one request (verl's batch reward manager)."""
    found = [item(s, g, e) for s, g, e in zip(solution_strs, ground_truths, extra_infos or [None] * len(solution_strs))]
    asked = [f for f, _ in found if f is not None]
    answers = iter(_client(url, token).verify_batch(asked) if asked else [])
    return [_scored(next(answers) if f is not None else no_code(why)) for f, why in found]
