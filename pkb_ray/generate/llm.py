"""Asking an OpenAI-compatible chat-completions endpoint, politely: rate limit, retries, extraction.

:class:`ChatClient` wraps the ``openai`` client, whose own retries (``model.max_retries``) cover
429, 408, 409, 5xx, timeouts and dropped connections with exponential backoff (0.5 s doubling to
8 s, jittered), honouring ``Retry-After`` / ``retry-after-ms`` up to two minutes and the server's
``x-should-retry``. Other errors (400, 401, 404) fail at once. Every attempt, retries included,
first passes a token-bucket limit on requests per second (an httpx request hook).
:func:`extract_code` takes the solution out of a reply. No Ray here.

The API key is read from the environment variable the config names, and only handed to the
client: it is never logged, stored or put in an error message.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass

from pkb_ray.spec.config import ModelConfig


class GenerationError(RuntimeError):
    """The endpoint gave no usable reply (after retries where they make sense)."""


class RateLimiter:
    """At most ``rate`` acquisitions per second on average, bursts of up to ``burst``; thread-safe."""

    def __init__(self, rate: float, burst: float = 1.0):
        self.rate, self.burst = rate, max(1.0, burst)
        self.tokens, self.last = self.burst, time.monotonic()
        self.lock = threading.Lock()

    def acquire(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
                self.last = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                wait = (1 - self.tokens) / self.rate
            time.sleep(wait)


@dataclass
class Reply:
    content: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    latency_s: float
    attempts: int
    model: str


def api_key(cfg: ModelConfig) -> str:
    """The key from the environment (a placeholder when the endpoint takes none)."""
    if not cfg.api_key_env:
        return "none"
    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise GenerationError(f"model.api_key_env: the environment variable {cfg.api_key_env} is not set")
    return key


def _attempts(exc: Exception) -> int:
    """How many requests the openai client sent before raising (it numbers its retries in a header)."""
    request = getattr(exc, "request", None)
    try:
        return int(request.headers.get("x-stainless-retry-count", 0)) + 1 if request is not None else 1
    except ValueError:
        return 1


class ChatClient:
    """One endpoint, shared by threads: every request, retries included, passes the rate limiter."""

    def __init__(self, cfg: ModelConfig):
        import openai

        self.cfg = cfg
        self.openai = openai
        self.limiter = RateLimiter(cfg.requests_per_second, burst=min(cfg.concurrency, cfg.requests_per_second))
        http = openai.DefaultHttpxClient(event_hooks={"request": [lambda request: self.limiter.acquire()]})
        self.client = openai.OpenAI(base_url=cfg.base_url, api_key=api_key(cfg), max_retries=cfg.max_retries,
                                    timeout=cfg.timeout_s, http_client=http)

    def complete(self, messages: list[dict], seed: int | None = None) -> Reply:
        cfg = self.cfg
        extra = {k: v for k, v in (("top_p", cfg.top_p), ("seed", seed)) if v is not None}
        extra[cfg.max_tokens_field] = cfg.max_tokens
        t0 = time.monotonic()
        try:
            raw = self.client.chat.completions.with_raw_response.create(
                model=cfg.model_id, messages=messages, temperature=cfg.temperature, **extra)
            r = raw.parse()
        except self.openai.OpenAIError as exc:
            n = _attempts(exc)
            tried = f" after {n} attempts" if n > 1 else ""
            raise GenerationError(f"request failed{tried}: {type(exc).__name__}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a body the client could not parse
            raise GenerationError(f"malformed reply from the endpoint: {type(exc).__name__}: {exc}") from None
        choices = getattr(r, "choices", None) or []
        content = choices[0].message.content if choices and choices[0].message else None
        if content is None:
            raise GenerationError("malformed reply from the endpoint: no message content in choices[0]")
        usage = getattr(r, "usage", None)
        return Reply(content=content, prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                     completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                     finish_reason=str(choices[0].finish_reason or ""), latency_s=time.monotonic() - t0,
                     attempts=raw.retries_taken + 1, model=str(getattr(r, "model", "") or cfg.model_id))


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(reply: str) -> tuple[str | None, str]:
    """(the solution module, "") from a reply, or (None, why not).

    Takes the last fenced block that defines ``solution`` (python-tagged or untagged); a reply
    that is only code (no fences) is taken whole if it defines ``solution``.
    """
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(reply)]
    candidates = [body for lang, body in blocks if lang in ("", "python", "py", "python3")]
    with_solution = [b for b in candidates if re.search(r"^\s*def\s+solution\s*\(", b, re.MULTILINE)]
    if with_solution:
        return with_solution[-1].strip() + "\n", ""
    if not blocks and re.search(r"^def\s+solution\s*\(", reply, re.MULTILINE):
        return reply.strip() + "\n", ""
    if candidates:
        return None, "the reply's code blocks define no solution(...) function"
    return None, "the reply has no Python code block"
