"""A Python client of ``pkb-ray serve`` (sync and async), with retries and backoff.

    from pkb_ray import RewardClient
    client = RewardClient("http://127.0.0.1:8000")          # token: $PKB_RAY_SERVE_TOKEN, or token=...
    verdict = client.verify("all_reduce", source)            # a dict: status, correct, reward, feedback, ...
    verdicts = client.verify_batch([{"problem_id": "all_reduce", "source": source}, ...])
    verdict = await AsyncRewardClient(url).verify("all_reduce", source)

Retried (tenacity), with exponential backoff and jitter, or after the Retry-After the service gives:
connection errors and timeouts, 429 (the service is full), 502, 503 (its evaluator failed with the
request) and 504 (no verdict by the deadline: asking again answers from the verdict once it is
known). Retries go on for at most ``retry_s`` seconds after the first failed attempt (and at most
``retries`` times, if given); then :class:`ServiceError` says what the last attempt got. Any other
4xx is the request's own fault and raises :class:`ServiceError` at once. Only httpx, tenacity and
the standard library: a trainer's workers import this without Ray.
"""

from __future__ import annotations

import email.utils
import logging
import os
import time
from typing import Any

import httpx
from tenacity import (AsyncRetrying, RetryCallState, RetryError, Retrying, retry_if_exception_type,
                      retry_if_result, wait_exponential, wait_random_exponential)

RETRIED = {429, 502, 503, 504}
TOKEN_ENV = "PKB_RAY_SERVE_TOKEN"
RETRY_S = 300.0  # long enough for the service to restart (its gangs start in about a minute)
CONNECT_TIMEOUT_S = 10.0  # a host that does not answer is retried, not waited on for timeout_s

log = logging.getLogger(__name__)


class ServiceError(Exception):
    """The service refused the request (a 4xx other than 429), or gave no answer within the retries."""

    def __init__(self, status: int | None, body: Any, note: str = ""):
        error = body.get("error") if isinstance(body, dict) else body
        said = f"{status}: {error}" if status else str(error)
        super().__init__(f"{said} ({note})" if note else said)
        self.status, self.body = status, body


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (a number or an HTTP date), None where absent or unreadable."""
    given = response.headers.get("retry-after")
    if not given:
        return None
    try:
        return max(0.0, float(given))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(given).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class _Budget:
    """One call's retries, for tenacity: the wait before the next attempt and when to stop. The time
    bound runs from the first failed attempt, so a request that waited its whole deadline for a 504
    still gets its retries."""

    def __init__(self, retry_s: float, retries: int | None, backoff_s: float, max_backoff_s: float):
        self.retry_s, self.retries = retry_s, retries
        # "equal jitter": half the exponential step fixed, half random (spreads many clients' retries)
        self.backoff = (wait_exponential(multiplier=backoff_s / 2, max=max_backoff_s / 2)
                        + wait_random_exponential(multiplier=backoff_s / 2, max=max_backoff_s / 2))
        self.first_failure: float | None = None

    def left_s(self) -> float:
        if self.first_failure is None:
            self.first_failure = time.monotonic()
        return self.retry_s - (time.monotonic() - self.first_failure)

    def wait(self, state: RetryCallState) -> float:
        outcome = state.outcome
        after = None if outcome is None or outcome.failed else _retry_after(outcome.result())
        wanted = after if after is not None else self.backoff(state)
        return max(0.0, min(wanted, self.left_s()))  # the last attempt lands at the end of the budget

    def stop(self, state: RetryCallState) -> bool:
        return self.left_s() <= 0 or (self.retries is not None and state.attempt_number > self.retries)


def _before_sleep(state: RetryCallState) -> None:
    outcome = state.outcome
    what = repr(outcome.exception()) if outcome.failed else f"HTTP {outcome.result().status_code}"
    level = logging.INFO if not outcome.failed and outcome.result().status_code == 429 else logging.WARNING
    log.log(level, "pkb-ray serve: %s (attempt %d); retrying in %.1f s", what, state.attempt_number,
            state.upcoming_sleep)


class _Policy:
    """What both clients share: the URL, the headers, when to retry and how long to wait."""

    def __init__(self, url: str, token: str | None, timeout_s: float, retry_s: float, retries: int | None,
                 backoff_s: float, max_backoff_s: float):
        self.url = url.rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        self.retry_s, self.retries, self.backoff_s, self.max_backoff_s = retry_s, retries, backoff_s, max_backoff_s

    def retrying(self, kind: type[Retrying] | type[AsyncRetrying]) -> Any:
        budget = _Budget(self.retry_s, self.retries, self.backoff_s, self.max_backoff_s)
        return kind(retry=retry_if_exception_type(httpx.TransportError)
                    | retry_if_result(lambda r: r.status_code in RETRIED),
                    wait=budget.wait, stop=budget.stop, before_sleep=_before_sleep, reraise=False)

    @staticmethod
    def outcome(response: httpx.Response) -> Any:
        """The body, or ServiceError for a refusal that a retry cannot mend."""
        body = _body(response)
        if response.status_code >= 400:
            raise ServiceError(response.status_code, body)
        return body

    @staticmethod
    def gave_up(error: RetryError, where: str, started: float) -> ServiceError:
        last = error.last_attempt
        note = f"gave up after {last.attempt_number} attempts in {time.monotonic() - started:.1f} s"
        if last.failed:
            return ServiceError(None, f"{where}: no answer: {last.exception()!r}", note)
        response = last.result()
        return ServiceError(response.status_code, _body(response), note)

    @staticmethod
    def item(problem_id: str, source: str, backend: str, **extra: Any) -> dict[str, Any]:
        return {"problem_id": problem_id, "source": source, "backend": backend,
                **{k: v for k, v in extra.items() if v is not None}}


class RewardClient:
    """Blocking client; one connection pool, reused (``with RewardClient(...) as c:`` closes it).

    ``timeout_s``: one attempt's limit (connecting: at most 10 s); ``retry_s``: how long to keep
    retrying after the first failed attempt; ``retries``: at most so many retries (None: only the time
    bound); ``backoff_s``, ``max_backoff_s``: about the first and the longest backoff between attempts
    (a Retry-After is waited as given, within ``retry_s``).
    """

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, timeout_s: float = 900.0,
                 retry_s: float = RETRY_S, retries: int | None = None, backoff_s: float = 0.5,
                 max_backoff_s: float = 30.0):
        self.policy = _Policy(url, token, timeout_s, retry_s, retries, backoff_s, max_backoff_s)
        self._http = httpx.Client(timeout=self.policy.timeout, headers=self.policy.headers)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        where, started = self.policy.url + path, time.monotonic()
        try:
            response = self.policy.retrying(Retrying)(self._http.request, method, where, **kwargs)
        except RetryError as exc:
            raise self.policy.gave_up(exc, where, started) from exc.last_attempt.exception()
        return self.policy.outcome(response)

    def verify(self, problem_id: str, source: str, backend: str = "torch", **extra: Any) -> dict[str, Any]:
        """One verdict (``extra``: sample_id, model, deadline_s)."""
        return self._call("POST", "/v1/verify", json=_Policy.item(problem_id, source, backend, **extra))

    def verify_batch(self, items: list[dict[str, Any]], deadline_s: float | None = None) -> list[dict[str, Any]]:
        body = {"items": items, **({"deadline_s": deadline_s} if deadline_s else {})}
        return self._call("POST", "/v1/verify_batch", json=body)["results"]

    def problems(self, backend: str = "torch", prompt: bool = True) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/problems", params={"backend": backend, "prompt": prompt})["problems"]

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/healthz")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class AsyncRewardClient:
    """The same calls as :class:`RewardClient`, awaitable (``async with AsyncRewardClient(...) as c:``).
    Its connection pool belongs to the event loop it is first used on."""

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, timeout_s: float = 900.0,
                 retry_s: float = RETRY_S, retries: int | None = None, backoff_s: float = 0.5,
                 max_backoff_s: float = 30.0, max_connections: int = 64):
        self.policy = _Policy(url, token, timeout_s, retry_s, retries, backoff_s, max_backoff_s)
        self._http = httpx.AsyncClient(timeout=self.policy.timeout, headers=self.policy.headers,
                                       limits=httpx.Limits(max_connections=max_connections))

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        where, started = self.policy.url + path, time.monotonic()
        try:
            response = await self.policy.retrying(AsyncRetrying)(self._http.request, method, where, **kwargs)
        except RetryError as exc:
            raise self.policy.gave_up(exc, where, started) from exc.last_attempt.exception()
        return self.policy.outcome(response)

    async def verify(self, problem_id: str, source: str, backend: str = "torch", **extra: Any) -> dict[str, Any]:
        return await self._call("POST", "/v1/verify", json=_Policy.item(problem_id, source, backend, **extra))

    async def verify_batch(self, items: list[dict[str, Any]], deadline_s: float | None = None) -> list[dict[str, Any]]:
        body = {"items": items, **({"deadline_s": deadline_s} if deadline_s else {})}
        return (await self._call("POST", "/v1/verify_batch", json=body))["results"]

    async def problems(self, backend: str = "torch", prompt: bool = True) -> list[dict[str, Any]]:
        return (await self._call("GET", "/v1/problems", params={"backend": backend, "prompt": prompt}))["problems"]

    async def health(self) -> dict[str, Any]:
        return await self._call("GET", "/healthz")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncRewardClient":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()
