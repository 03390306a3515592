"""The HTTP API of ``pkb-ray serve`` (FastAPI, documented at /docs) and its Ray Serve deployment.

One replica holds the :class:`~pkb_ray.serve.engine.Engine` (its gangs, cache and results folder);
request handlers are coroutines that wait on the engine's futures, so thousands can wait while
the gangs work. Every bad request is answered with a 4xx and a JSON ``error`` before it reaches
the engine: malformed JSON 400, a missing or ill-typed field or an unknown backend 422, an
unknown problem 404 (with the nearest ids), a source over ``serve.max_source_bytes`` 413, too
many unanswered requests 429 (Retry-After), no verdict by the request's deadline 504.
"""

import asyncio
import difflib
import hmac
import time
from typing import Any, Literal

from fastapi import Body, FastAPI, Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from ray import serve

from pkb_ray.serve.adapters import openrlhf
from pkb_ray.serve.adapters.labels import no_code
from pkb_ray.serve.answers import answer, evaluator_version
from pkb_ray.serve.engine import Busy, Engine, EvaluatorFailed, Request
from pkb_ray.spec.config import SweepConfig

OPEN_PATHS = ("/healthz", "/docs", "/openapi.json")  # answered without the token
NEAREST = 5


class VerifyItem(BaseModel):
    """One sample to judge."""

    model_config = ConfigDict(extra="ignore")
    problem_id: str = Field(description="a problem id of GET /v1/problems")
    source: str = Field(description="the whole Python module defining solution(...)")
    backend: Literal["torch", "cuda", "triton"] = "torch"
    sample_id: str | None = Field(None, description="the trainer's own id, stored with the result")
    model: str | None = Field(None, description="stored as the result's model (default serve.model)")
    deadline_s: float | None = Field(None, gt=0, description="answer by then (504 after; default serve.deadline_s)")


class VerifyBatch(BaseModel):
    items: list[VerifyItem]
    deadline_s: float | None = Field(None, gt=0, description="for the whole batch (default serve.deadline_s)")


class ApiError(Exception):
    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(error)
        self.status, self.body, self.headers = status, {"error": error, **extra}, headers


api = FastAPI(title="pkb_ray reward service", version=evaluator_version(),
              description="Verdicts, rewards and feedback for multi-GPU kernel samples (docs/serve.md).")


@api.exception_handler(ApiError)
async def _api_error(_: HttpRequest, exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body, status_code=exc.status, headers=exc.headers)


@api.exception_handler(RequestValidationError)
async def _invalid(_: HttpRequest, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return JSONResponse({"error": f"malformed JSON: {errors[0].get('ctx', {}).get('error', errors[0]['msg'])}"},
                            status_code=400)
    said = "; ".join(f"{'.'.join(str(p) for p in e['loc'] if p != 'body')}: {e['msg']}" for e in errors)
    return JSONResponse({"error": said, "detail": [{k: e[k] for k in ("loc", "msg", "type")} for e in errors]},
                        status_code=422)


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0},
                  logging_config={"log_level": "WARNING", "enable_access_log": False})
@serve.ingress(api)
class RewardService:
    """The deployment: one replica, one engine."""

    def __init__(self, cfg: dict[str, Any], token: str | None):
        self.cfg = SweepConfig.model_validate(cfg)
        self.token = token
        self.engine = Engine(self.cfg)

    def __del__(self) -> None:  # Serve calls it when the replica stops: the gangs go with it
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()

    def _authorize(self, request: HttpRequest) -> None:
        if self.token is None or request.url.path in OPEN_PATHS:
            return
        given = request.headers.get("authorization", "")
        if not (given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), self.token.encode())):
            raise ApiError(401, "a bearer token is required (Authorization: Bearer <token>)",
                           headers={"WWW-Authenticate": "Bearer"})

    def _check(self, item: VerifyItem, where: str = "") -> None:
        if item.problem_id not in self.engine.problems:
            near = difflib.get_close_matches(item.problem_id, list(self.engine.problems), n=NEAREST, cutoff=0.5)
            raise ApiError(404, f"{where}unknown problem_id {item.problem_id!r}" +
                           (f"; did you mean {', '.join(near)}?" if near else "; GET /v1/problems lists them"),
                           nearest=near)
        size = len(item.source.encode())
        if size > self.cfg.serve.max_source_bytes:
            raise ApiError(413, f"{where}source is {size} bytes; the limit is {self.cfg.serve.max_source_bytes} "
                                f"(serve.max_source_bytes)")

    def _submit(self, item: VerifyItem):
        try:
            return self.engine.submit(Request(item.problem_id, item.source, item.backend, item.sample_id, item.model))
        except Busy as exc:
            raise ApiError(429, str(exc), headers={"Retry-After": str(int(exc.retry_after + 0.999))},
                           retry_after_s=exc.retry_after) from exc

    async def _verdict(self, future, deadline_s: float) -> dict[str, Any]:
        try:
            verdict = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout=max(0.0, deadline_s))
        except asyncio.TimeoutError as exc:
            raise ApiError(504, "no verdict by the request's deadline; the evaluation goes on, and asking again "
                                "for the same sample answers from its verdict once it is known",
                           headers={"Retry-After": "5"}, status="deadline_exceeded") from exc
        except EvaluatorFailed as exc:
            raise ApiError(503, str(exc), headers={"Retry-After": "1"}, status="evaluator_error") from exc
        return answer(verdict.result, self.cfg, verdict.cached)

    @api.post("/v1/verify")
    async def verify(self, item: VerifyItem, request: HttpRequest) -> dict[str, Any]:
        """Judge one sample: its status, speedup with interval, reward and feedback."""
        self._authorize(request)
        self._check(item)
        return await self._verdict(self._submit(item), item.deadline_s or self.cfg.serve.deadline_s)

    @api.post("/v1/verify_batch")
    async def verify_batch(self, batch: VerifyBatch, request: HttpRequest) -> dict[str, Any]:
        """Judge many samples; the results in the items' order (an item past the deadline: its error)."""
        self._authorize(request)
        if len(batch.items) > self.cfg.serve.max_batch:
            raise ApiError(413, f"{len(batch.items)} items; the limit is {self.cfg.serve.max_batch} (serve.max_batch)")
        for i, item in enumerate(batch.items):
            self._check(item, f"items[{i}]: ")
        return {"results": await self._batch(batch.items, batch.deadline_s)}

    async def _batch(self, items: list[VerifyItem], deadline_s: float | None) -> list[dict[str, Any]]:
        futures = [self._submit(item) for item in items]
        end = time.monotonic() + (deadline_s or self.cfg.serve.deadline_s)

        async def one(item: VerifyItem, future) -> dict[str, Any]:
            left = min(end, time.monotonic() + (item.deadline_s or float("inf"))) - time.monotonic()
            try:
                return await self._verdict(future, left)
            except ApiError as exc:
                return {**exc.body, "correct": False, "reward": None}

        return list(await asyncio.gather(*(one(i, f) for i, f in zip(items, futures))))

    @api.post("/openrlhf/reward")
    async def openrlhf_reward(self, request: HttpRequest, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        """OpenRLHF's remote reward model (``--remote_rm_url``): query/prompts/labels in, rewards out."""
        self._authorize(request)
        try:
            found = openrlhf.items(body)
        except (ValueError, KeyError, TypeError) as exc:
            raise ApiError(422, str(exc)) from exc
        asked = []
        for i, (item, _) in enumerate(found):
            if item is not None:
                asked.append(VerifyItem(**item))
                self._check(asked[-1], f"query[{i}]: ")
        answers = iter(await self._batch(asked, None))
        return openrlhf.answer([next(answers) if item is not None else no_code(why) for item, why in found])

    @api.get("/v1/problems")
    async def problems(self, request: HttpRequest, backend: Literal["torch", "cuda", "triton"] = "torch",
                       prompt: bool = True) -> dict[str, Any]:
        """Every problem: id, signature, world sizes, dtypes and (``prompt``) the messages a model gets."""
        self._authorize(request)
        return {"problems": [self._problem(p, backend, prompt) for p in sorted(self.engine.problems)]}

    @api.get("/v1/problems/{problem_id}")
    async def problem(self, problem_id: str, request: HttpRequest,
                      backend: Literal["torch", "cuda", "triton"] = "torch") -> dict[str, Any]:
        self._authorize(request)
        self._check(VerifyItem(problem_id=problem_id, source=""))
        return self._problem(problem_id, backend, True)

    def _problem(self, problem_id: str, backend: str, prompt: bool) -> dict[str, Any]:
        from pkb_ray.generate.prompt import messages

        problem = self.engine.problems[problem_id]
        meta = problem.meta
        out = {"id": problem_id, "name": meta.name, "category": meta.category, "signature": list(problem.signature),
               "world_sizes": [w for w in self.cfg.hardware.world_sizes if meta.world_sizes.supports(w)],
               "dtypes": list(meta.dtypes)}
        if prompt:
            out["prompt"] = messages(problem, backend, self.cfg)
        return out

    @api.get("/healthz")
    async def healthz(self) -> JSONResponse:
        """200 while the gang pool runs (with its figures), 503 otherwise."""
        health = self.engine.health()
        return JSONResponse(health, status_code=200 if health["ok"] else 503)
