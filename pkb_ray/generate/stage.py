"""Generation: K samples per problem and backend from a chat endpoint, and refinement rounds.

It runs in the driver, not in Ray: API keys live only in the driver's environment (a local Ray
starts without them, :mod:`pkb_ray.pipeline.cluster`), so nothing a sample can reach holds one. One
``Generator`` per call (so its concurrency and requests-per-second limits are global) asks the
endpoint (:mod:`pkb_ray.generate.llm`) from ``concurrency`` threads and turns each reply into a sample row.
Rows are written to Parquet as they arrive (``<generated_dir>/round=<r>/part-*.parquet``, whole
or not at all, in a local folder or at a URI: :mod:`pkb_ray.results.storage`) before anything is evaluated;
a run that names the same folder again generates only what is missing.

A sample row keeps in ``metadata``: the round, the raw reply, token counts, finish reason,
latency, attempts, the endpoint's model name, the request seed, ``parent_key`` (the sample it
refines) and ``feedback`` (what the model was told), or ``generation_error`` when the reply held
no solution (validation turns that into ``invalid_sample`` with the message).
"""

from __future__ import annotations

import json
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa

from pkb_ray.generate.llm import ChatClient, GenerationError, api_key, extract_code
from pkb_ray.generate.prompt import feedback, messages
from pkb_ray.problem import Problem
from pkb_ray.results.storage import Folder
from pkb_ray.spec.config import ModelConfig, SweepConfig
from pkb_ray.spec.names import GENERATED_BACKENDS, Status
from pkb_ray.spec.schema import Sample

log = logging.getLogger("pkb_ray.generate")
META_KEYS = ("round", "raw_reply", "prompt_tokens", "completion_tokens", "finish_reason", "latency_s", "attempts",
             "endpoint_model", "seed", "parent_key", "feedback", "generation_error")
ROW_SCHEMA = pa.schema([("problem_id", pa.string()), ("model", pa.string()), ("sample_index", pa.int64()),
                        ("backend", pa.string()), ("source", pa.string()),
                        ("metadata", pa.struct([(k, pa.string()) for k in META_KEYS]))])


@dataclass
class GenerationStats:
    """Generation so far in one call of :func:`generate`, for live progress (W&B's ``generation/*``)."""

    total: int  # requests this call sends
    done: int = 0
    errors: int = 0  # replies without a solution, and failed requests
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None  # None: the model's prices are not configured

    def add(self, rows: list[dict[str, Any]], model: ModelConfig) -> None:
        for row in rows:
            meta = row["metadata"]
            self.done += 1
            self.errors += bool(meta["generation_error"])
            self.prompt_tokens += int(meta["prompt_tokens"] or 0)
            self.completion_tokens += int(meta["completion_tokens"] or 0)
        self.cost_usd = cost_usd(model, self.prompt_tokens, self.completion_tokens)


def cost_usd(model: ModelConfig, prompt_tokens: int, completion_tokens: int) -> float | None:
    """What the tokens cost at ``model.usd_per_mtok_in/out`` (per million tokens); None if unpriced."""
    if model.usd_per_mtok_in is None and model.usd_per_mtok_out is None:
        return None
    return (prompt_tokens * (model.usd_per_mtok_in or 0.0) + completion_tokens * (model.usd_per_mtok_out or 0.0)) / 1e6


OnGeneration = Callable[[GenerationStats], None]


def model_label(cfg: SweepConfig, backend: str) -> str:
    """Samples of several backends are told apart as models (``name:backend``): pass@k pools per model."""
    backends = cfg.backend.backends or list(GENERATED_BACKENDS)
    return cfg.model.name if len(backends) == 1 else f"{cfg.model.name}:{backend}"


def first_requests(cfg: SweepConfig, problems: dict[str, Problem]) -> list[dict[str, Any]]:
    """Round 0: K requests per chosen problem and backend."""
    out = []
    for pid, problem in sorted(problems.items()):
        for backend in cfg.backend.backends or GENERATED_BACKENDS:
            msgs = messages(problem, backend, cfg)
            for i in range(cfg.model.samples_asked):
                seed = None if cfg.model.seed is None else cfg.model.seed + i
                out.append({"problem_id": pid, "backend": backend, "model": model_label(cfg, backend),
                            "sample_index": i, "round": 0, "seed": seed, "messages": json.dumps(msgs),
                            "parent_key": "", "feedback": ""})
    return out


def _key(row: dict[str, Any]) -> tuple:
    meta = row.get("metadata") or {}
    return row["model"], row["problem_id"], int(row["sample_index"]), int(meta.get("round") or row.get("round") or 0)


class Generator:
    """Asks the endpoint for one request at a time (:meth:`row`); thread-safe, one client for all."""

    def __init__(self, model: ModelConfig):
        self.cfg = model
        self.client = ChatClient(model)

    def row(self, req: dict[str, Any]) -> dict[str, Any]:
        seed = None if pd.isna(req["seed"]) else int(req["seed"])  # None, or NaN from a DataFrame
        meta = dict.fromkeys(META_KEYS, "")
        meta.update(round=str(req["round"]), seed="" if seed is None else str(seed), parent_key=req["parent_key"],
                    feedback=req["feedback"])
        source = ""
        try:
            reply = self.client.complete(json.loads(req["messages"]), seed=seed)
        except GenerationError as exc:
            meta["generation_error"] = f"generation failed: {exc}"
        else:
            meta.update(raw_reply=reply.content, prompt_tokens=str(reply.prompt_tokens),
                        completion_tokens=str(reply.completion_tokens), finish_reason=reply.finish_reason,
                        latency_s=f"{reply.latency_s:.3f}", attempts=str(reply.attempts), endpoint_model=reply.model)
            code, why = extract_code(reply.content)
            if code is None:
                meta["generation_error"] = f"no solution in the model's reply: {why}"
            else:
                source = code
        return {"problem_id": req["problem_id"], "model": req["model"], "sample_index": int(req["sample_index"]),
                "backend": req["backend"], "source": source, "metadata": meta}


def write_rows(rows: list[dict[str, Any]], out_dir: str | Path | Folder, round_: int) -> str:
    """One new file of ``rows`` under ``out_dir`` (a folder or URI), whole or not at all (:mod:`pkb_ray.results.storage`)."""
    return Folder.of(out_dir).write_table(f"round={round_}/part-{uuid.uuid4().hex[:12]}.parquet",
                                          pa.Table.from_pylist(rows, schema=ROW_SCHEMA))


def read_generated(out_dir: str | Path | Folder) -> list[dict[str, Any]]:
    """The sample rows written under ``out_dir`` so far (none where it does not exist)."""
    return [row for table in Folder.of(out_dir).read_tables() for row in table.to_pylist()]


def require_key(cfg: SweepConfig) -> None:
    """Fail now (before W&B, any request or Ray) where a generating model's API key is missing."""
    if cfg.model.provider != "replay":
        api_key(cfg.model)


def first_round(cfg: SweepConfig, problems: dict[str, Problem], out_dir: str | Path,
                on_progress: OnGeneration | None = None) -> list[dict[str, Any]]:
    """Round 0's sample rows for ``problems``. A missing API key fails here, before any request or
    any other work (refinement rounds need it too, even when round 0 is all reused)."""
    api_key(cfg.model)
    return generate(first_requests(cfg, problems), cfg, out_dir, on_progress)


def generate(requests: list[dict[str, Any]], cfg: SweepConfig, out_dir: str | Path | Folder,
             on_progress: OnGeneration | None = None) -> list[dict[str, Any]]:
    """Sample rows for ``requests``: those already in ``out_dir`` are reused, the rest generated and
    written; ``on_progress`` hears after every batch written (not for reused rows)."""
    out_dir = Folder.of(out_dir)  # resolved once: a URI's client serves every batch
    have = {_key(r): r for r in read_generated(out_dir)}
    todo = [r for r in requests if _key(r) not in have]
    reused = [have[_key(r)] for r in requests if _key(r) in have]
    if reused:
        log.info("%d generated samples reused from %s", len(reused), out_dir.uri)
    if not todo:
        return reused
    log.info("generating %d samples from %s (%s), %d at a time", len(todo), cfg.model.model_id, cfg.model.base_url,
             cfg.model.concurrency)
    made = _ask(Generator(cfg.model), todo, out_dir, on_progress)
    return reused + made


def _ask(gen: Generator, todo: list[dict[str, Any]], out_dir: Folder,
         on_progress: OnGeneration | None) -> list[dict[str, Any]]:
    """Rows for ``todo`` (in its order), ``concurrency`` requests at a time, written in batches as they complete."""
    n = gen.cfg.concurrency
    pool = ThreadPoolExecutor(n, thread_name_prefix="generate")
    try:
        futures = {pool.submit(gen.row, req): i for i, req in enumerate(todo)}
        made: dict[int, dict[str, Any]] = {}
        batch: list[dict[str, Any]] = []
        stats = GenerationStats(total=len(todo))
        for fut in as_completed(futures):
            made[futures[fut]] = fut.result()
            batch.append(made[futures[fut]])
            if len(batch) == n or len(made) == len(todo):
                _write_batch(batch, out_dir)
                stats.add(batch, gen.cfg)
                log.info("generated %d/%d samples (%d without a solution so far), %d+%d tokens", stats.done,
                         stats.total, stats.errors, stats.prompt_tokens, stats.completion_tokens)
                if on_progress:
                    on_progress(stats)
                batch = []
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # on an error, the requests not yet sent are not sent
    return [made[i] for i in range(len(todo))]


def _write_batch(rows: list[dict[str, Any]], out_dir: Folder) -> None:
    for round_ in sorted({int(r["metadata"]["round"]) for r in rows}):
        write_rows([r for r in rows if int(r["metadata"]["round"]) == round_], out_dir, round_)


def refine_requests(cfg: SweepConfig, problems: dict[str, Problem], results: pd.DataFrame,
                    generated: list[dict[str, Any]], round_: int) -> list[dict[str, Any]]:
    """Requests of round ``round_``: the samples of the previous round that failed or were slow, each with
    its conversation so far and the evaluator's feedback."""
    by_key = {Sample.model_validate(r).key: r for r in generated}
    prev = worst_per_sample(results[results["round"].fillna(0).astype(int) == round_ - 1])
    out = []
    for res in prev.to_dict("records"):
        slow = res["status"] == Status.CORRECT.value and (res.get("speedup") or 0) < cfg.model.refine_below_speedup
        if res["status"] == Status.CORRECT.value and not slow:
            continue
        row = by_key.get(res["sample_key"])
        if row is None or res["problem_id"] not in problems:
            continue
        history = _conversation(row, by_key)
        text = feedback(res, cfg, cfg.model.refine_below_speedup)
        base = messages(problems[res["problem_id"]], row["backend"], cfg)
        seed = row["metadata"].get("seed")
        out.append({"problem_id": row["problem_id"], "backend": row["backend"], "model": row["model"],
                    "sample_index": int(row["sample_index"]), "round": round_,
                    "seed": int(seed) + 1000 if seed else None,  # another draw than the answer it refines
                    "messages": json.dumps(base + history + [{"role": "user", "content": text}]),
                    "parent_key": res["sample_key"], "feedback": text})
    return out


def worst_per_sample(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per sample to give feedback on, where it was evaluated at several world sizes or
    sizes (eval.sizes): a failure if it failed anywhere, else its slowest; the smallest world size
    among equals. ``sizes_evaluated`` counts the sizes the sample ran at."""
    if rows.empty:
        return rows.assign(sizes_evaluated=pd.Series(dtype="int64"))
    slot = ["model", "problem_id", "sample_index"]
    ok = rows["status"] == Status.CORRECT.value
    ranked = rows.assign(_ok=ok, _speed=rows["speedup"].where(ok).fillna(0.0),
                         sizes_evaluated=rows.groupby(slot)["size"].transform("nunique"))
    return (ranked.sort_values(["_ok", "_speed", "world_size"], kind="stable")
            .drop_duplicates(slot).drop(columns=["_ok", "_speed"]))


def _conversation(row: dict[str, Any], by_key: dict) -> list[dict[str, str]]:
    """The assistant replies and feedback that led to ``row``, oldest first, ending with its reply."""
    turns = []
    while row is not None:
        meta = row["metadata"]
        turns.insert(0, {"role": "assistant", "content": meta.get("raw_reply") or "(no reply)"})
        if meta.get("feedback"):
            turns.insert(0, {"role": "user", "content": meta["feedback"]})
        row = by_key.get(meta.get("parent_key")) if meta.get("parent_key") else None
    return turns
