"""The HTTP API of ``pkb-ray serve`` (FastAPI, documented at /docs) and its Ray Serve deployment.

One replica holds the :class:`~pkb_ray.serve.engine.Engine` (its gangs, cache and results folder);
request handlers are coroutines that wait on the engine's futures, so thousands can wait while
the gangs work. Every bad request is answered with a 4xx and a JSON ``error`` before it reaches
the engine: malformed JSON 400, a missing or ill-typed field or an unknown backend 422, an
unknown problem 404 (with the nearest ids), a source over ``serve.max_source_bytes`` 413, no room
by the request's deadline 429 (Retry-After). After it: no verdict by the deadline 504, the
evaluator's own failure 503 (Retry-After); in a batch, each item's error in its slot.

The OpenRLHF route answers every rollout with a reward (OpenRLHF loses a rollout it gets no 200
for, after 5 tries 1 s apart, and then stops its step): an item it cannot judge gets 0 and the reason.
/docs and /redoc load their scripts from this service (fastapi-offline's copies), not from a CDN.
"""

import asyncio
import difflib
import hmac
import logging
import time
from importlib.resources import files
from typing import Any, Literal

from fastapi import Body, FastAPI, Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ray import serve
from starlette.exceptions import HTTPException

from pkb_ray.serve.adapters import openrlhf
from pkb_ray.serve.adapters.labels import refused
from pkb_ray.serve.answers import answer, evaluator_version
from pkb_ray.serve.engine import PARSING, Busy, Engine, EvaluatorFailed, Request
from pkb_ray.spec.config import SweepConfig

log = logging.getLogger(__name__)

ASSETS_PATH = "/docs-assets"
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
OPEN_PATHS = ("/healthz", "/docs", "/redoc", "/openapi.json")  # answered without the token (and ASSETS_PATH/*)
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
    """An HTTP error with a JSON body ``{"error": ..., **extra}`` (``extra`` may hold a ``status``)."""

    def __init__(self, code: int, error: str, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(error)
        self.code, self.body, self.headers = code, {"error": error, **extra}, headers


api = FastAPI(title="pkb_ray reward service", version=evaluator_version(), docs_url=None, redoc_url=None,
              description="Verdicts, rewards and feedback for multi-GPU kernel samples (docs/serve.md).")


def _said(errors: list[dict[str, Any]]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'] if p != 'body')}: {e['msg']}" for e in errors)


@api.exception_handler(ApiError)
async def _api_error(_: HttpRequest, exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body, status_code=exc.code, headers=exc.headers)


@api.exception_handler(RequestValidationError)
async def _invalid(_: HttpRequest, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return JSONResponse({"error": f"malformed JSON: {errors[0].get('ctx', {}).get('error', errors[0]['msg'])}"},
                            status_code=400)
    return JSONResponse({"error": _said(errors), "detail": [{k: e[k] for k in ("loc", "msg", "type")} for e in errors]},
                        status_code=422)


@api.exception_handler(ValidationError)
async def _invalid_inside(_: HttpRequest, exc: ValidationError) -> JSONResponse:
    return JSONResponse({"error": _said(exc.errors())}, status_code=422)


@api.exception_handler(HTTPException)
async def _http_error(_: HttpRequest, exc: HTTPException) -> JSONResponse:  # an unknown path (404), method (405)
    return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


@api.exception_handler(Exception)
async def _bug(_: HttpRequest, exc: Exception) -> JSONResponse:  # a bug of the service's own: still JSON
    return JSONResponse({"error": f"the service failed with this request: {exc!r}"}, status_code=500)


@api.get("/docs", include_in_schema=False)
async def swagger_ui(request: HttpRequest) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(openapi_url=f"{root}{api.openapi_url}", title=f"{api.title} - API docs",
                               swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
                               swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
                               swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon.png")


@api.get("/redoc", include_in_schema=False)
async def redoc(request: HttpRequest) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_redoc_html(openapi_url=f"{root}{api.openapi_url}", title=f"{api.title} - ReDoc",
                          redoc_js_url=f"{root}{ASSETS_PATH}/redoc.standalone.js",
                          redoc_favicon_url=f"{root}{ASSETS_PATH}/favicon.png", with_google_fonts=False)


@api.get(ASSETS_PATH + "/{name}", include_in_schema=False)
async def docs_asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise ApiError(404, f"no such file: {name!r}")
    return FileResponse(str(files("fastapi_offline") / "static" / name), headers={"Cache-Control": "max-age=86400"})


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
        path = request.url.path
        if self.token is None or path in OPEN_PATHS or path.startswith(ASSETS_PATH + "/"):
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

    def _submit(self, items: list[VerifyItem], deadline_s: float) -> list:
        """The items' futures (:meth:`Engine.submit_all`), or 429 with none taken."""
        try:
            return self.engine.submit_all([Request(i.problem_id, i.source, i.backend, i.sample_id, i.model)
                                           for i in items], deadline_s)
        except Busy as exc:
            raise ApiError(429, str(exc), headers={"Retry-After": str(int(exc.retry_after + 0.999))},
                           status="busy", retry_after_s=round(exc.retry_after, 1),
                           expected_wait_s=round(exc.expected_wait, 1)) from exc

    async def _verdict(self, future, deadline_s: float) -> dict[str, Any]:
        try:
            verdict = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout=max(0.0, deadline_s))
        except asyncio.TimeoutError as exc:
            raise ApiError(504, "no verdict by the request's deadline; the evaluation goes on, and asking again "
                                "for the same sample answers from its verdict once it is known",
                           headers={"Retry-After": "5"}, status="deadline_exceeded") from exc
        except EvaluatorFailed as exc:
            raise ApiError(503, str(exc), headers={"Retry-After": "1"}, status="evaluator_error") from exc
        with PARSING:  # the answer may parse the source (engine.PARSING says why)
            return answer(verdict.result, self.cfg, verdict.cached)

    async def _slot(self, future, deadline_s: float) -> dict[str, Any]:
        """One item's verdict in a batch, or its error in its place (the other items are not disturbed)."""
        try:
            return await self._verdict(future, deadline_s)
        except ApiError as exc:
            return {**exc.body, "correct": False, "reward": None}
        except Exception as exc:  # noqa: BLE001 - a bug with one item must not take the batch's answers
            log.exception("serve: answering a batch item failed")
            return {"error": f"the service failed with this item: {exc!r}", "status": "evaluator_error",
                    "correct": False, "reward": None}

    @api.post("/v1/verify")
    async def verify(self, item: VerifyItem, request: HttpRequest) -> dict[str, Any]:
        """Judge one sample: its status, speedup with interval, reward and feedback."""
        self._authorize(request)
        self._check(item)
        deadline = item.deadline_s or self.cfg.serve.deadline_s
        end = time.monotonic() + deadline
        future = self._submit([item], deadline)[0]
        return await self._verdict(future, end - time.monotonic())

    @api.post("/v1/verify_batch")
    async def verify_batch(self, batch: VerifyBatch, request: HttpRequest) -> dict[str, Any]:
        """Judge many samples; the results in the items' order (an item without a verdict: its error)."""
        self._authorize(request)
        if len(batch.items) > self.cfg.serve.max_batch:
            raise ApiError(413, f"{len(batch.items)} items; the limit is {self.cfg.serve.max_batch} (serve.max_batch)")
        for i, item in enumerate(batch.items):
            self._check(item, f"items[{i}]: ")
        deadline = batch.deadline_s or self.cfg.serve.deadline_s
        start = time.monotonic()
        futures = self._submit(batch.items, deadline)  # the whole batch is taken, or none of it (429)
        return {"results": list(await asyncio.gather(*(
            self._slot(f, min(deadline, item.deadline_s or deadline) - (time.monotonic() - start))
            for item, f in zip(batch.items, futures))))}

    @api.post("/openrlhf/reward")
    async def openrlhf_reward(self, request: HttpRequest, body: Any = Body(...)) -> dict[str, Any]:
        """OpenRLHF's remote reward model (``--reward.remote_url``): query/prompts/labels in, rewards out.
        Every rollout gets a reward; one that cannot be judged gets 0 with the reason in its verdict."""
        self._authorize(request)
        try:
            rollouts = openrlhf.rollouts(body)
        except ValueError as exc:
            raise ApiError(422, str(exc)) from exc
        end = time.monotonic() + self.cfg.serve.openrlhf_deadline_s
        return openrlhf.answer(list(await asyncio.gather(*(self._rollout(r, end) for r in rollouts))))

    async def _rollout(self, rollout: openrlhf.Rollout, end: float) -> dict[str, Any]:
        if rollout.verdict is not None:
            return rollout.verdict
        try:
            item = VerifyItem(**rollout.item)
            self._check(item)
        except ValidationError as exc:  # an unknown backend
            return refused(f"label {rollout.label!r}: {_said(exc.errors())}", "invalid_label")
        except ApiError as exc:  # an unknown problem (404), a source too large (413)
            return refused(f"label {rollout.label!r}: {exc.body['error']}" if exc.code == 404 else exc.body["error"],
                           "invalid_label" if exc.code == 404 else "invalid_sample")
        for attempt in range(2):  # the evaluator's own failure (503) is tried once more while time is left
            try:
                future = self._submit([item], end - time.monotonic())[0]
            except ApiError as exc:  # no room by the deadline: a reward now beats a 429 OpenRLHF would lose
                return refused(exc.body["error"], "busy")
            verdict = await self._slot(future, end - time.monotonic())
            if verdict.get("status") != "evaluator_error" or attempt or end - time.monotonic() < 1.0:
                break
        if "error" in verdict:
            return {**verdict, "reward": 0.0, "feedback": verdict["error"]}
        return verdict

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
