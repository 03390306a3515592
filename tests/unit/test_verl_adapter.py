"""The verl adapter called as verl 0.9.1 calls a custom reward function, against a real HTTP server
on loopback standing in for ``pkb-ray serve`` (tests/fake_endpoint.py); a closed port is an outage.

Read in verl 0.9.1 (the PyPI wheel):
- ``verl/trainer/ppo/reward.py``, ``get_custom_reward_fn``: loads ``config.reward.custom_reward_function``
  (``path``: ``pkg://a.b.c`` is ``importlib.import_module("a.b.c")``, else a file; ``name``), and calls
  it with ``reward_kwargs`` merged over the call's keywords; a coroutine function stays awaitable.
- ``verl/experimental/reward_loop/reward_manager/naive.py`` (dapo.py and gdpo.py the same),
  ``run_single``: one response at a time, ``compute_score(data_source=..., solution_str=...,
  ground_truth=..., extra_info=...)``, awaited where ``inspect.iscoroutinefunction`` says so, run in
  the loop's thread pool otherwise; ``extra_info`` is the row's dict plus ``num_turns`` and
  ``rollout_reward_scores``; ``score`` is the reward, every other key goes to reward_extra_info.
- ``verl/experimental/reward_loop/reward_loop.py``, ``RewardLoopWorker.compute_score_batch``: a
  worker gathers its share's ``run_single`` calls concurrently; ``RewardLoopManager.compute_rm_score``
  reads the first result's extra keys from every result (so every result has the same keys).
- verl 0.8's ``verl/workers/reward_manager/batch.py`` (no longer loaded by 0.9) passes
  ``data_sources`` and ``extra_infos`` as numpy object arrays: ``compute_score_batch``.
"""

import asyncio
import importlib
import inspect
import re
import socket
import time

import numpy as np
import pytest

from conftest import REPO
from fake_endpoint import Endpoint
from pkb_ray.serve.adapters import verl
from pkb_ray.serve.adapters.verl import ServiceUnavailable, compute_score, compute_score_async, compute_score_batch

CODE = "import torch.distributed as dist\n\ndef solution(x):\n    out = x.clone()\n    dist.all_reduce(out)\n" \
       "    return out\n"
COMPLETION = f"Here is a faster version.\n```python\n{CODE}```\n"
VERDICT = {"status": "correct", "correct": True, "speedup": 1.5, "reward": 0.29, "reference_copy": False,
           "feedback": "Correct on every rank."}
KEYS = {"score", "correct", "speedup", "reference_copy", "status", "feedback"}


def _root(ep: Endpoint) -> str:
    return ep.base_url.removesuffix("/v1")


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _verl_call(fn, reward_kwargs: dict, i: int = 0, ground_truth: str = "all_reduce:cuda", completion=COMPLETION):
    """One response as verl 0.9's naive reward manager hands it to the loaded function (not awaited)."""
    extra_info = {"index": i, "sample_id": f"step3-{i}", "num_turns": 2, "rollout_reward_scores": {}}
    call = dict(data_source="pkb_ray", solution_str=completion, ground_truth=ground_truth, extra_info=extra_info)
    return fn(**{**call, **reward_kwargs})  # reward_kwargs win, as in get_custom_reward_fn


def test_the_documented_verl_config_names_functions_verl_can_load():
    page = (REPO / "docs" / "serve.md").read_text()
    path = re.search(r"path: (pkg://\S+)", page).group(1)
    names = {*re.findall(r"custom_reward_function\.name=(\w+)", page), *re.findall(r"name: (compute_\w+)", page)}
    module = importlib.import_module(path.removeprefix("pkg://"))  # what verl does with a pkg:// path
    assert names == {"compute_score_async"} and inspect.iscoroutinefunction(getattr(module, "compute_score_async"))
    assert not inspect.iscoroutinefunction(module.compute_score)  # the remote manager's (it asserts sync)


def test_a_response_is_scored_with_verls_arguments():
    with Endpoint(lambda body, n: (200, VERDICT)) as ep:
        scored = _verl_call(compute_score, {"url": _root(ep), "token": "tok"})
    assert ep.requests == [{"problem_id": "all_reduce", "source": CODE, "backend": "cuda", "sample_id": "step3-0"}]
    assert ep.auth == ["Bearer tok"]
    assert scored == {"score": 0.29, "correct": 1.0, "speedup": 1.5, "reference_copy": 0.0, "status": "correct",
                      "feedback": "Correct on every rank."}


def test_the_async_function_is_awaited_and_a_workers_responses_are_in_flight_together():
    with Endpoint(lambda body, n: (200, VERDICT, {}, 0.3)) as ep:
        async def worker_share():  # RewardLoopWorker.compute_score_batch: its share, gathered
            return await asyncio.gather(*(_verl_call(compute_score_async, {"url": _root(ep)}, i) for i in range(6)))

        started = time.monotonic()
        scored = asyncio.run(worker_share())
        took = time.monotonic() - started
    assert [s["score"] for s in scored] == [0.29] * 6 and all(set(s) == KEYS for s in scored)
    assert sorted(r["sample_id"] for r in ep.requests) == [f"step3-{i}" for i in range(6)]
    assert ep.max_in_flight > 1 and took < 6 * 0.3  # concurrent, not one after another


def test_a_completion_without_code_scores_zero_without_a_request():
    with Endpoint(lambda body, n: (200, VERDICT)) as ep:
        scored = _verl_call(compute_score, {"url": _root(ep)}, completion="I cannot help with that.")
        again = asyncio.run(_verl_call(compute_score_async, {"url": _root(ep)}, completion="No code."))
    assert ep.requests == [] and scored["score"] == again["score"] == 0.0 and scored["status"] == "invalid_sample"
    assert set(scored) == set(again) == KEYS  # the same keys as a verdict's (verl reads the first's from all)


def test_an_outage_raises_after_the_retry_window():
    """The issue's failure: a closed port scored a correct sample 0. Now: retry for retry_s, then raise."""
    url = _closed_port()
    for fn in (compute_score, compute_score_async):
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable, match=f"pkb-ray serve at {url} gave no verdict.*ConnectError"):
            result = _verl_call(fn, {"url": url, "retry_s": 1.0})
            if inspect.iscoroutine(result):
                asyncio.run(result)
        took = time.monotonic() - started
        assert 1.0 <= took < 4.0, (fn.__name__, took)


def test_failure_score_scores_an_outage_instead_and_a_refusal_still_raises():
    url = _closed_port()
    scored = _verl_call(compute_score, {"url": url, "retry_s": 0.3, "failure_score": -1.0})
    assert scored["score"] == -1.0 and scored["status"] == "service_error" and set(scored) == KEYS
    scored = asyncio.run(_verl_call(compute_score_async, {"url": url, "retry_s": 0.3, "failure_score": 0.0}))
    assert scored["score"] == 0.0 and scored["status"] == "service_error"
    with Endpoint(lambda body, n: (404, {"error": "unknown problem_id 'all_reduc'"})) as ep:
        with pytest.raises(ServiceUnavailable, match="404: unknown problem_id"):
            _verl_call(compute_score, {"url": _root(ep), "failure_score": 0.0}, ground_truth="all_reduc")
    assert len(ep.requests) == 1  # a refusal is not retried
    with Endpoint(lambda body, n: (413, {"error": "source is 300000 bytes"})) as ep:
        scored = _verl_call(compute_score, {"url": _root(ep)})  # the sample's own fault: scored, not raised
    assert scored["score"] == 0.0 and scored["status"] == "invalid_sample" and "300000" in scored["feedback"]


def test_the_batch_function_takes_verls_numpy_object_arrays():
    def answer(body, n):
        return 200, {"results": [{**VERDICT, "reward": 0.1 * (i + 1)} for i, _ in enumerate(body["items"])]}

    data_sources = np.array(["pkb_ray"] * 3, dtype=object)
    extra_infos = np.array([{"sample_id": "a"}, {"sample_id": "b"}, {"sample_id": "c"}], dtype=object)
    solutions = [COMPLETION, "no code here", COMPLETION]
    with Endpoint(answer) as ep:
        scored = compute_score_batch(data_sources=data_sources, solution_strs=solutions,
                                     ground_truths=["all_reduce", "all_reduce", "all_gather"], extra_infos=extra_infos,
                                     url=_root(ep))
    assert [r["sample_id"] for r in ep.requests[0]["items"]] == ["a", "c"]
    assert [r["problem_id"] for r in ep.requests[0]["items"]] == ["all_reduce", "all_gather"]
    assert [s["status"] for s in scored] == ["correct", "invalid_sample", "correct"]
    assert [s["score"] for s in scored] == [0.1, 0.0, 0.2]


def test_a_batch_item_without_a_verdict_raises_or_gets_failure_score():
    missing = {"results": [VERDICT, {"error": "no verdict by the deadline", "status": "deadline_exceeded",
                                     "correct": False, "reward": None}]}
    with Endpoint(lambda body, n: (200, missing)) as ep:
        kwargs = dict(data_sources=np.array(["pkb_ray"] * 2, dtype=object), solution_strs=[COMPLETION] * 2,
                      ground_truths=np.array(["all_reduce"] * 2, dtype=object), extra_infos=None, url=_root(ep))
        with pytest.raises(ServiceUnavailable, match="no verdict by the deadline"):
            compute_score_batch(**kwargs)
        scored = compute_score_batch(**kwargs, failure_score=-0.5)
    assert [s["score"] for s in scored] == [0.29, -0.5]


def test_clients_are_kept_per_settings_and_per_event_loop():
    first = verl._client("http://127.0.0.1:1", None, 1.0)
    assert verl._client("http://127.0.0.1:1", None, 1.0) is first and verl._client("http://127.0.0.1:1", None, 2.0) \
        is not first

    async def one():
        return verl._async_client("http://127.0.0.1:1", None, 1.0), verl._async_client("http://127.0.0.1:1", None, 1.0)

    a, b = asyncio.run(one())
    c, _ = asyncio.run(one())
    assert a is b and a is not c  # an AsyncClient's connections belong to its loop
