"""The reward service's Python client under outage and refusal: what it retries, how long it waits
(Retry-After, backoff, the time bound) and what it raises. A real HTTP server on loopback with
scripted answers stands in for the service (tests/fake_endpoint.py); a closed port is an outage."""

import asyncio
import socket
import time

import pytest

from fake_endpoint import Endpoint
from pkb_ray.serve.client import AsyncRewardClient, RewardClient, ServiceError

VERDICT = {"status": "correct", "correct": True, "reward": 0.5}
FAST = dict(backoff_s=0.05, max_backoff_s=0.2)  # short waits where no Retry-After is given


def _root(ep: Endpoint) -> str:
    return ep.base_url.removesuffix("/v1")


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there once the socket is closed


def _gaps(ep: Endpoint) -> list[float]:
    return [b - a for a, b in zip(ep.arrivals, ep.arrivals[1:])]


def test_busy_and_failing_answers_are_retried_after_their_retry_after():
    replies = [(429, {"error": "full"}, {"Retry-After": "1"}), (503, {"error": "evaluator"}, {"Retry-After": "1"}),
               (502, b"bad gateway"), (504, {"error": "no verdict yet"}), (200, VERDICT)]
    with Endpoint(lambda body, n: replies[n]) as ep, RewardClient(_root(ep), token="t0k", **FAST) as client:
        assert client.verify("all_reduce", "src", sample_id="s1") == VERDICT
    assert len(ep.requests) == 5 and ep.requests[0] == {"problem_id": "all_reduce", "source": "src",
                                                        "backend": "torch", "sample_id": "s1"}
    assert set(ep.auth) == {"Bearer t0k"}
    gaps = _gaps(ep)
    assert gaps[0] >= 0.95 and gaps[1] >= 0.95  # Retry-After: 1 was honoured
    assert gaps[2] < 0.6 and gaps[3] < 0.6  # none given: the (short) backoff


def test_a_retry_after_past_the_time_bound_waits_to_its_end_and_a_past_date_means_now():
    replies = [(503, {"error": "x"}, {"Retry-After": "100"}), (200, VERDICT)]
    with Endpoint(lambda body, n: replies[n]) as ep, RewardClient(_root(ep), retry_s=1.0, **FAST) as client:
        started = time.monotonic()
        assert client.verify("all_reduce", "src") == VERDICT
        assert 0.9 <= time.monotonic() - started < 2.5  # the last attempt at the end of retry_s, not after 100 s
    replies = [(429, {"error": "y"}, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}), (200, VERDICT)]
    with Endpoint(lambda body, n: replies[n]) as ep, RewardClient(_root(ep), backoff_s=5, max_backoff_s=5) as client:
        assert client.verify("all_reduce", "src") == VERDICT
    assert len(ep.requests) == 2 and _gaps(ep)[0] < 1.0  # an HTTP date already past: at once (not the 5 s backoff)


@pytest.mark.parametrize("status", [400, 401, 404, 413, 422])
def test_a_refusal_raises_at_once(status):
    with Endpoint(lambda body, n: (status, {"error": f"refused {status}"})) as ep, \
            RewardClient(_root(ep), **FAST) as client:
        with pytest.raises(ServiceError, match=f"{status}: refused {status}") as raised:
            client.verify("all_reduce", "src")
    assert raised.value.status == status and raised.value.body == {"error": f"refused {status}"}
    assert len(ep.requests) == 1


def test_an_outage_raises_after_the_retry_window_not_before():
    with RewardClient(_closed_port(), retry_s=1.5, **FAST) as client:
        started = time.monotonic()
        with pytest.raises(ServiceError, match="no answer: ConnectError") as raised:
            client.health()
        took = time.monotonic() - started
    assert 1.5 <= took < 4.0, took
    assert raised.value.status is None and "gave up after" in str(raised.value)


def test_retries_bounds_the_number_of_attempts():
    with Endpoint(lambda body, n: (503, {"error": "still failing"})) as ep, \
            RewardClient(_root(ep), retries=2, **FAST) as client:
        with pytest.raises(ServiceError, match=r"503: still failing \(gave up after 3 attempts") as raised:
            client.verify("all_reduce", "src")
    assert raised.value.status == 503 and len(ep.requests) == 3


def test_the_time_bound_runs_from_the_first_failure():
    """A request that waited past retry_s for its 504 is still asked again (the verdict is on its way)."""
    replies = [(504, {"error": "no verdict by the deadline"}, {}, 1.2), (200, VERDICT)]
    with Endpoint(lambda body, n: replies[n]) as ep, RewardClient(_root(ep), retry_s=0.5, **FAST) as client:
        assert client.verify("all_reduce", "src") == VERDICT
    assert len(ep.requests) == 2


def test_the_async_client_retries_and_gives_up_the_same_way():
    replies = [(429, {"error": "full"}, {"Retry-After": "1"}), (503, {"error": "x"}), (200, VERDICT)]

    async def ask(url: str, **kwargs):
        async with AsyncRewardClient(url, **FAST, **kwargs) as client:
            return await client.verify("all_reduce", "src")

    with Endpoint(lambda body, n: replies[n]) as ep:
        assert asyncio.run(ask(_root(ep))) == VERDICT
    assert len(ep.requests) == 3 and _gaps(ep)[0] >= 0.95
    started = time.monotonic()
    with pytest.raises(ServiceError, match="no answer: ConnectError"):
        asyncio.run(ask(_closed_port(), retry_s=1.0))
    assert 1.0 <= time.monotonic() - started < 3.5
    with Endpoint(lambda body, n: (404, {"error": "unknown problem_id"})) as ep:
        with pytest.raises(ServiceError, match="404"):
            asyncio.run(ask(_root(ep)))
    assert len(ep.requests) == 1
