"""verl's custom reward function, answered by ``pkb-ray serve``.

In a verl 0.9 PPO/GRPO config (``verl.trainer.ppo.reward.get_custom_reward_fn`` reads
``config.reward.custom_reward_function``; docs/serve.md#clients-and-trainer-adapters has the command line)::

    reward:
      custom_reward_function:
        path: pkg://pkb_ray.serve.adapters.verl     # verl imports the module (or give this file's path)
        name: compute_score_async                   # awaited by verl's reward loop; compute_score blocks a thread
        reward_kwargs: {url: "http://127.0.0.1:8000", retry_s: 300}

Each row's ``ground_truth`` (``reward_model.ground_truth``) is the problem id (``all_reduce``, or
``all_reduce:cuda`` for another backend); ``extra_info`` may carry ``problem_id``, ``backend`` and
``sample_id``. verl 0.9's reward managers (naive, dapo, gdpo, remote, rate_limited: one response at a
time) call ``fn(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)``
and await it where it is a coroutine function; they take the ``score`` of the dict returned and put
every other key in reward_extra_info (the same keys for every row, numbers or strings).

No verdict is never a score: where the service cannot be reached, or answers 429/5xx, the call
retries for ``retry_s`` seconds, then raises :class:`ServiceUnavailable` and stops the training step
(a trainer that went on would learn from zeros). ``failure_score`` (a number) scores such a sample
instead. A request the service refuses for good (401 token, 404 unknown problem, 422) always raises:
every sample would fail the same way. A completion with no code scores 0 without a request, and so
does a source over the service's size limit (413): those are the sample's own faults.

``compute_score_batch`` is for verl 0.8 and before (``reward_model.reward_manager=batch``, whose
manager passes numpy object arrays); verl 0.9 has no batch reward manager.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from pkb_ray.serve.adapters.labels import item, no_code
from pkb_ray.serve.client import RETRY_S, AsyncRewardClient, RewardClient, ServiceError

URL_ENV = "PKB_RAY_SERVE_URL"
SAMPLES_FAULT = {413}  # refusals that are the sample's doing (its source is too large): scored, not raised


class ServiceUnavailable(RuntimeError):
    """The reward service gave no verdict within the retries, or refused the request for good."""


def _url(url: str | None) -> str:
    return url or os.environ.get(URL_ENV, "http://127.0.0.1:8000")


@lru_cache(maxsize=8)
def _client(url: str | None, token: str | None, retry_s: float) -> RewardClient:
    return RewardClient(_url(url), token=token, retry_s=retry_s)


# an AsyncRewardClient's connections belong to one event loop: one client per loop and settings
_async_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()


def _async_client(url: str | None, token: str | None, retry_s: float) -> AsyncRewardClient:
    mine = _async_clients.setdefault(asyncio.get_running_loop(), {})
    key = (url, token, retry_s)
    if key not in mine:
        mine[key] = AsyncRewardClient(_url(url), token=token, retry_s=retry_s)
    return mine[key]


def _scored(verdict: dict[str, Any]) -> dict[str, Any]:
    """verl's shape: ``score`` and flat extras of fixed types (NaN-free: -1.0 where unknown)."""
    speedup = verdict.get("speedup")
    return {"score": float(verdict.get("reward") or 0.0), "correct": float(bool(verdict.get("correct"))),
            "speedup": float(speedup) if speedup is not None else -1.0,
            "reference_copy": float(bool(verdict.get("reference_copy"))), "status": str(verdict.get("status")),
            "feedback": str(verdict.get("feedback") or verdict.get("error") or "")}


def _failed(error: ServiceError, url: str | None, failure_score: float | None, one: bool = True) -> dict[str, Any]:
    """A sample the service gave no verdict for: scored (its own fault, or failure_score is set) or raised."""
    if one and error.status in SAMPLES_FAULT:
        return _scored({"status": "invalid_sample", "reward": 0.0, "error": str(error)})
    refused = error.status is not None and 400 <= error.status < 500 and error.status != 429
    if failure_score is None or refused:
        hint = "" if refused else " (reward_kwargs.retry_s waits longer; reward_kwargs.failure_score scores instead)"
        raise ServiceUnavailable(f"pkb-ray serve at {_url(url)} gave no verdict: {error}{hint}") from error
    return _scored({"status": "service_error", "reward": float(failure_score), "error": str(error)})


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  url: str | None = None, token: str | None = None, retry_s: float = RETRY_S,
                  failure_score: float | None = None, **_: Any) -> dict[str, Any]:
    """The reward of one response (verl's custom reward function, blocking: verl runs it in a thread)."""
    found, why = item(solution_str, ground_truth, extra_info)
    if found is None:
        return _scored(no_code(why))
    try:
        return _scored(_client(url, token, float(retry_s)).verify(**found))
    except ServiceError as exc:
        return _failed(exc, url, failure_score)


async def compute_score_async(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                              url: str | None = None, token: str | None = None, retry_s: float = RETRY_S,
                              failure_score: float | None = None, **_: Any) -> dict[str, Any]:
    """:func:`compute_score` as a coroutine function: verl 0.9's reward loop awaits it, so a worker keeps
    every response of its share in flight at once without a thread each."""
    found, why = item(solution_str, ground_truth, extra_info)
    if found is None:
        return _scored(no_code(why))
    try:
        return _scored(await _async_client(url, token, float(retry_s)).verify(**found))
    except ServiceError as exc:
        return _failed(exc, url, failure_score)


def compute_score_batch(data_sources: Sequence, solution_strs: Sequence[str], ground_truths: Sequence,
                        extra_infos: Sequence | None = None, url: str | None = None, token: str | None = None,
                        retry_s: float = RETRY_S, failure_score: float | None = None, **_: Any) -> list[dict[str, Any]]:
    """Every response of a batch in one request (verl <= 0.8's batch reward manager: lists or numpy object
    arrays in, a list out). A batch the service gives no answer for raises, or every sample of it gets
    ``failure_score``."""
    n = len(solution_strs)
    extras = list(extra_infos) if extra_infos is not None else [None] * n  # not `or`: numpy arrays have no truth
    found = [item(str(s), g, e) for s, g, e in zip(list(solution_strs), list(ground_truths), extras)]
    asked = [f for f, _ in found if f is not None]
    try:
        verdicts = _client(url, token, float(retry_s)).verify_batch(asked) if asked else []
    except ServiceError as exc:
        failed = _failed(exc, url, failure_score, one=False)
        return [failed if f is not None else _scored(no_code(why)) for f, why in found]
    answers = iter(verdicts)
    out = []
    for f, why in found:
        if f is None:
            out.append(_scored(no_code(why)))
            continue
        verdict = next(answers)
        if verdict.get("reward") is None:  # an item without a verdict by the batch's deadline
            out.append(_failed(ServiceError(None, verdict), url, failure_score, one=False))
        else:
            out.append(_scored(verdict))
    return out
