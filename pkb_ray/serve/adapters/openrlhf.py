"""OpenRLHF's remote reward model, answered by ``pkb-ray serve`` at ``POST /openrlhf/reward``.

OpenRLHF (``--remote_rm_url http://<service>/openrlhf/reward``) posts, for a batch of rollouts,
``{"query": [prompt + response, ...], "prompts": [prompt, ...], "labels": [label, ...]}`` and reads
``rewards`` from the JSON answer (newer versions also ``scores`` and ``extra_logs``). The label of
each prompt (its ``--label_key`` column) is the problem id, ``problem_id:backend``, or a JSON object
with ``problem_id`` and ``backend``. The response is the query with its prompt taken off.
"""

from __future__ import annotations

from typing import Any

from pkb_ray.serve.adapters.labels import item


def items(body: dict[str, Any]) -> list[tuple[dict[str, Any] | None, str]]:
    """(service item or None, why not) per query of an OpenRLHF request; ValueError for a malformed one."""
    queries, prompts, labels = body.get("query"), body.get("prompts"), body.get("labels")
    if not isinstance(queries, list) or not isinstance(labels, list) or len(labels) != len(queries):
        raise ValueError("an OpenRLHF request has lists 'query' and 'labels' of one length (and 'prompts')")
    prompts = prompts if isinstance(prompts, list) and len(prompts) == len(queries) else [""] * len(queries)
    out = []
    for query, prompt, label in zip(queries, prompts, labels):
        response = query[len(prompt):] if prompt and query.startswith(prompt) else query
        out.append(item(response, label))
    return out


def answer(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenRLHF's answer: ``rewards`` (and ``scores``, the same), plus per-item logs."""
    rewards = [float(v.get("reward") or 0.0) for v in verdicts]
    return {"rewards": rewards, "scores": rewards,
            "extra_logs": {"correct": [float(bool(v.get("correct"))) for v in verdicts],
                           "speedup": [float(v["speedup"]) if v.get("speedup") is not None else -1.0 for v in verdicts]},
            "verdicts": verdicts}
