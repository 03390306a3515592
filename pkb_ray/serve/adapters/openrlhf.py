"""OpenRLHF's remote reward model, answered by ``pkb-ray serve`` at ``POST /openrlhf/reward``.

OpenRLHF (``--reward.remote_url http://<service>/openrlhf/reward``; ``--remote_rm_url`` before
0.10.2) posts ``{"query": [prompt + response, ...], "prompts": [prompt, ...], "labels": [label, ...]}``
(0.11: one request per rollout, lists of one) and reads ``rewards`` (``scores`` where given) and
``extra_logs`` from the JSON answer. The label of each prompt (its ``--data.label_key`` column;
``--label_key`` before 0.10.2) is the problem id, ``problem_id:backend``, or a JSON object with
``problem_id`` and ``backend``.

The code is taken from the response only, never from the prompt (every prompt holds the reference's
code block). OpenRLHF's query is the decoded prompt tokens, left-truncated when the prompt is too
long, followed by the response, so the query need not begin with the prompt as sent:
:func:`isolate` finds where the prompt ends in it, and a rollout whose response cannot be found
gets reward 0 with the reason rather than a verdict of the prompt's code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pkb_ray.serve.adapters.labels import item, no_code, refused, target

# What chat templates put before the model's turn (add_generation_prompt=True): ChatML (Qwen, ...),
# Llama 3, Llama 2 / Mistral, Phi-3 / Zephyr / GLM, DeepSeek V3 / R1, Gemma, Granite, gpt-oss.
ASSISTANT_MARKERS = ("<|im_start|>assistant", "<|start_header_id|>assistant<|end_header_id|>", "[/INST]",
                     "<|assistant|>", "<\uff5cAssistant\uff5c>", "<start_of_turn>model",
                     "<|start_of_role|>assistant<|end_of_role|>", "<|start|>assistant")
MIN_OVERLAP = 32  # non-space characters of the prompt's end a left-truncated query must begin with
TAIL_CHARS = 64  # the prompt's end sought in the query when its template has no known marker
_NON_SPACE = re.compile(r"\S")


@dataclass(frozen=True)
class Rollout:
    """One query of a request: the service item to judge, or the verdict given without judging."""

    label: Any
    item: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None


def rollouts(body: Any) -> list[Rollout]:
    """The rollouts of an OpenRLHF request, in order; ValueError for a malformed request."""
    if not isinstance(body, dict):
        raise ValueError("an OpenRLHF request is a JSON object with lists 'query', 'prompts' and 'labels'")
    queries, prompts, labels = body.get("query"), body.get("prompts"), body.get("labels")
    if not isinstance(queries, list) or not isinstance(labels, list) or len(labels) != len(queries):
        raise ValueError("an OpenRLHF request has lists 'query' and 'labels' of one length (and 'prompts')")
    if prompts is not None and (not isinstance(prompts, list) or len(prompts) != len(queries)):
        raise ValueError(f"'prompts' must be a list as long as 'query' ({len(queries)})")
    out = []
    for i, (query, label) in enumerate(zip(queries, labels)):
        prompt = None if prompts is None else prompts[i]
        if not isinstance(query, str) or not (prompt is None or isinstance(prompt, str)):
            raise ValueError(f"query[{i}] and prompts[{i}] must be strings")
        out.append(rollout(query, prompt, label))
    return out


def rollout(query: str, prompt: str | None, label: Any) -> Rollout:
    """A query (prompt + response) and its label as a :class:`Rollout`."""
    try:
        problem_id, _ = target(label)
    except (ValueError, KeyError, TypeError) as exc:
        return Rollout(label, verdict=refused(f"label {label!r} names no problem: {exc!r}", "invalid_label"))
    if not problem_id:
        return Rollout(label, verdict=refused("the rollout has no label: give OpenRLHF --data.label_key, the dataset "
                                              "column holding the problem id", "invalid_label"))
    response, why = isolate(query, prompt)
    if response is None:
        return Rollout(label, verdict=refused(why, "invalid_sample"))
    found, why = item(response, label)
    return Rollout(label, item=found) if found is not None else Rollout(label, verdict=no_code(why))


def isolate(query: str, prompt: str | None) -> tuple[str | None, str]:
    """(the response, "") from a query, or (None, why not). In order of trust:

    1. the query begins with the prompt;
    2. ignoring whitespace (a tokenizer's decode need not give back the prompt's spaces): the
       prompt within the query (a BOS token before it), else the longest end of the prompt that the
       query begins with (OpenRLHF keeps a too long prompt's last tokens), at least ``MIN_OVERLAP``
       characters;
    3. the prompt's last turn (from its last assistant marker, or its last ``TAIL_CHARS``
       characters) at its last place in the query: what follows can only be the response.

    With no prompt given, what follows the query's last assistant marker."""
    if prompt is None:
        at = _last_marker(query)
        if at is None:
            return None, ("the request has no prompts and the query has no assistant-turn marker "
                          f"({', '.join(ASSISTANT_MARKERS[:4])}, ...): the response cannot be told from the prompt")
        return query[at[1]:], ""
    if query.startswith(prompt):
        return query[len(prompt):], ""
    q, q_at = _dense(query)
    p, _ = _dense(prompt)
    if not p:
        return query, ""
    end = q.find(p)
    if end >= 0:
        return query[q_at[end + len(p) - 1] + 1:], ""
    if kept := _overlap(p, q):
        return query[q_at[kept - 1] + 1:], ""
    at = _last_marker(prompt)
    anchor = _dense(prompt[at[0]:])[0] if at is not None else p[-TAIL_CHARS:]
    end = q.rfind(anchor)
    if end >= 0:
        return query[q_at[end + len(anchor) - 1] + 1:], ""
    return None, (f"the query ({len(query)} characters) does not begin with its prompt ({len(prompt)}) or with the "
                  f"prompt's end, and the prompt's last turn ({anchor[:60]!r}) is not in it: the response cannot be "
                  f"told from the prompt, whose code is not the answer")


def _dense(text: str) -> tuple[str, list[int]]:
    """The text without whitespace, and where each of its characters stands in ``text``."""
    at = [m.start() for m in _NON_SPACE.finditer(text)]
    return "".join(text[i] for i in at), at


def _overlap(p: str, q: str) -> int:
    """The length of the longest end of ``p`` that ``q`` begins with, if at least MIN_OVERLAP (or all of p); else 0."""
    need = min(MIN_OVERLAP, len(p))
    if len(q) < need:
        return 0
    head = q[:need]
    i = p.find(head)
    while i >= 0:  # the first place that holds is the longest end
        if q.startswith(p[i:]):
            return len(p) - i
        i = p.find(head, i + 1)
    return 0


def _last_marker(text: str) -> tuple[int, int] | None:
    """(start, end) of the last assistant marker in ``text``, or None."""
    found = [(text.rfind(m), m) for m in ASSISTANT_MARKERS]
    start, marker = max(found)
    return None if start < 0 else (start, start + len(marker))


def items(body: Any) -> list[tuple[dict[str, Any] | None, str]]:
    """(service item or None, why not) per query of an OpenRLHF request; ValueError for a malformed one."""
    return [(r.item, "" if r.verdict is None else str(r.verdict.get("error") or r.verdict["feedback"]))
            for r in rollouts(body)]


def answer(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenRLHF's answer: ``rewards`` (and ``scores``, the same), per-item numbers in ``extra_logs``
    (OpenRLHF logs each key; numbers only), and the verdicts themselves. ``judged`` is 0 for an item
    that got no verdict of its sample (a bad label, no response found, no room or time)."""
    rewards = [float(v.get("reward") or 0.0) for v in verdicts]
    return {"rewards": rewards, "scores": rewards,
            "extra_logs": {"correct": [float(bool(v.get("correct"))) for v in verdicts],
                           "speedup": [float(v["speedup"]) if v.get("speedup") is not None else -1.0 for v in verdicts],
                           "judged": [0.0 if "error" in v else 1.0 for v in verdicts]},
            "verdicts": verdicts}
