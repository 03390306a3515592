"""A Python client of ``pkb-ray serve`` (sync and async), with retries and backoff.

    from pkb_ray import RewardClient
    client = RewardClient("http://127.0.0.1:8000")          # token: $PKB_RAY_SERVE_TOKEN, or token=...
    verdict = client.verify("all_reduce", source)            # a dict: status, correct, reward, feedback, ...
    verdicts = client.verify_batch([{"problem_id": "all_reduce", "source": source}, ...])
    verdict = await AsyncRewardClient(url).verify("all_reduce", source)

Retried, with exponential backoff and jitter (Retry-After where the service gives one): connection
errors, 429 (the service is full), 503 (its evaluator failed with the request) and 504 (no verdict
by the deadline: asking again answers from the verdict once it is known). Any other 4xx is the
request's own fault and raises :class:`ServiceError` at once. Only httpx and the standard library:
a trainer's workers import this without Ray.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import httpx

RETRIED = {429, 502, 503, 504}
TOKEN_ENV = "PKB_RAY_SERVE_TOKEN"


class ServiceError(Exception):
    """The service refused the request (a 4xx other than 429), or every retry failed."""

    def __init__(self, status: int | None, body: Any):
        error = body.get("error") if isinstance(body, dict) else body
        super().__init__(f"{status}: {error}" if status else str(error))
        self.status, self.body = status, body


class _Policy:
    """What both clients share: the URL, the headers, when to retry and how long to wait."""

    def __init__(self, url: str, token: str | None, timeout_s: float, retries: int, backoff_s: float,
                 max_backoff_s: float):
        self.url = url.rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s, self.retries, self.backoff_s, self.max_backoff_s = timeout_s, retries, backoff_s, max_backoff_s

    def wait_s(self, attempt: int, response: httpx.Response | None) -> float:
        after = response.headers.get("retry-after") if response is not None else None
        if after:
            try:
                return min(self.max_backoff_s, float(after))
            except ValueError:
                pass
        return min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * (0.5 + random.random() / 2)

    @staticmethod
    def outcome(response: httpx.Response) -> Any:
        """The body, or ServiceError for a refusal that a retry cannot mend."""
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code >= 400:
            raise ServiceError(response.status_code, body)
        return body

    @staticmethod
    def item(problem_id: str, source: str, backend: str, **extra: Any) -> dict[str, Any]:
        return {"problem_id": problem_id, "source": source, "backend": backend,
                **{k: v for k, v in extra.items() if v is not None}}


class RewardClient:
    """Blocking client; one connection pool, reused (``with RewardClient(...) as c:`` closes it)."""

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, timeout_s: float = 900.0,
                 retries: int = 5, backoff_s: float = 0.5, max_backoff_s: float = 30.0):
        self.policy = _Policy(url, token, timeout_s, retries, backoff_s, max_backoff_s)
        self._http = httpx.Client(timeout=timeout_s, headers=self.policy.headers)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        policy = self.policy
        for attempt in range(policy.retries + 1):
            response = None
            try:
                response = self._http.request(method, policy.url + path, **kwargs)
                if response.status_code not in RETRIED:
                    return policy.outcome(response)
            except httpx.TransportError as exc:
                if attempt == policy.retries:
                    raise ServiceError(None, f"{policy.url}{path}: {exc!r}") from exc
            if attempt < policy.retries:
                time.sleep(policy.wait_s(attempt, response))
        return policy.outcome(response)

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
    """The same calls as :class:`RewardClient`, awaitable (``async with AsyncRewardClient(...) as c:``)."""

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, timeout_s: float = 900.0,
                 retries: int = 5, backoff_s: float = 0.5, max_backoff_s: float = 30.0, max_connections: int = 64):
        self.policy = _Policy(url, token, timeout_s, retries, backoff_s, max_backoff_s)
        self._http = httpx.AsyncClient(timeout=timeout_s, headers=self.policy.headers,
                                       limits=httpx.Limits(max_connections=max_connections))

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        policy = self.policy
        for attempt in range(policy.retries + 1):
            response = None
            try:
                response = await self._http.request(method, policy.url + path, **kwargs)
                if response.status_code not in RETRIED:
                    return policy.outcome(response)
            except httpx.TransportError as exc:
                if attempt == policy.retries:
                    raise ServiceError(None, f"{policy.url}{path}: {exc!r}") from exc
            if attempt < policy.retries:
                await asyncio.sleep(policy.wait_s(attempt, response))
        return policy.outcome(response)

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
