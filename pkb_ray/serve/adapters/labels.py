"""What a trainer's dataset says of a prompt (its label, ground truth or extra info) as a service item."""

from __future__ import annotations

import json
from typing import Any

from pkb_ray.generate.llm import extract_code


def target(label: Any, extra: dict[str, Any] | None = None) -> tuple[str, str]:
    """(problem_id, backend) from a label: ``"all_reduce"``, ``"all_reduce:cuda"``, a JSON object or a
    dict with ``problem_id`` (and ``backend``); ``extra`` (verl's extra_info) may name either."""
    extra = extra or {}
    if isinstance(label, str) and label.lstrip().startswith("{"):
        label = json.loads(label)
    if isinstance(label, dict):
        return str(label["problem_id"]), str(label.get("backend") or extra.get("backend") or "torch")
    problem, _, backend = str(extra.get("problem_id") or label).partition(":")
    return problem.strip(), (backend or extra.get("backend") or "torch").strip()


def item(completion: str, label: Any, extra: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, str]:
    """(the service item, "") for a completion, or (None, why) when it holds no solution module."""
    problem_id, backend = target(label, extra)
    code, why = extract_code(completion)
    if code is None:
        return None, why
    found = {"problem_id": problem_id, "source": code, "backend": backend}
    if extra and extra.get("sample_id"):
        found["sample_id"] = str(extra["sample_id"])
    return found, ""


def no_code(why: str) -> dict[str, Any]:
    """The verdict of a completion with no code, as the service would give it (no request is made)."""
    return {"status": "invalid_sample", "correct": False, "speedup": None, "reward": 0.0,
            "feedback": f"No solution was found in the reply: {why}. Reply with ONE Python code block holding "
                        f"the whole module, defining solution(...).", "cached": False, "eval_seconds": 0.0}


def refused(why: str, status: str = "invalid_sample") -> dict[str, Any]:
    """The verdict of an item the service does not judge (its response cannot be found, its label
    names no problem or backend, no room by its deadline): reward 0, the reason as ``error`` and
    ``feedback``. Not the model's doing, so it is no verdict of the sample (``judged`` 0 in logs)."""
    return {"status": status, "correct": False, "speedup": None, "reward": 0.0, "error": why, "feedback": why,
            "cached": False, "eval_seconds": 0.0}
