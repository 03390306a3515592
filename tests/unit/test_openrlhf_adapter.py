"""OpenRLHF's rollouts as the service reads them: the code comes from the response only, however
the query was decoded (a left-truncated prompt, spaces that did not round-trip, a BOS token), and a
response that cannot be found, or holds no code, earns 0 with the reason, never a verdict of the
prompt's reference code (issue 65: such a rollout earned 0.57)."""

import re

import pytest

from pkb_ray.generate.prompt import messages
from pkb_ray.problem import load_problems
from pkb_ray.serve.adapters import openrlhf
from pkb_ray.spec.config import SweepConfig

ANSWER = ("import torch\nimport torch.distributed as dist\n\n\ndef solution(x):\n    out = x.clone()\n"
          "    dist.all_reduce(out)  # the model's own\n    return out\n")
REPLY = f"Here is a faster version.\n```python\n{ANSWER}```<|im_end|>"
NO_CODE = "I would use a ring all-reduce here, but I will not write it.<|im_end|>"


@pytest.fixture(scope="module")
def prompt() -> str:
    """The all_reduce prompt as OpenRLHF sends it with --data.apply_chat_template (ChatML, Qwen's)."""
    cfg = SweepConfig()
    chat = messages(load_problems(cfg.problems_dir)["all_reduce"], "torch", cfg)
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in chat) + "<|im_start|>assistant\n"
    assert "def solution(x" in text  # the reference's code block: what must never be judged
    return text


def one(query: str, prompt: str | None, label="all_reduce") -> openrlhf.Rollout:
    body = {"query": [query], "labels": [label], **({"prompts": [prompt]} if prompt is not None else {})}
    (found,) = openrlhf.rollouts(body)
    return found


def test_the_response_of_an_intact_query_is_judged(prompt):
    found = one(prompt + REPLY, prompt)
    assert found.verdict is None and found.item == {"problem_id": "all_reduce", "source": ANSWER, "backend": "torch"}


@pytest.mark.parametrize("kept", [0.9, 0.5, 0.1])
def test_a_left_truncated_prompt_is_told_from_the_response(prompt, kept):
    """OpenRLHF keeps a too long prompt's last tokens: the query begins inside the prompt (here inside
    its reference block or after it), and the response is still found."""
    query_prompt = prompt[int(len(prompt) * (1 - kept)):]
    assert not (query_prompt + REPLY).startswith(prompt)
    assert one(query_prompt + REPLY, prompt).item["source"] == ANSWER
    silent = one(query_prompt + NO_CODE, prompt)  # the old way judged the prompt's reference here
    assert silent.item is None and silent.verdict["status"] == "invalid_sample"
    assert silent.verdict["reward"] == 0.0 and "No solution was found" in silent.verdict["feedback"]


def test_a_prompt_that_did_not_round_trip_is_told_from_the_response(prompt):
    """A decode that changed the prompt's spaces (collapsed blank lines, no space before punctuation,
    Windows line ends)."""
    for changed in (re.sub(r"\n\n+", "\n", prompt), prompt.replace(" ,", ",").replace(": ", ":"),
                    prompt.replace("\n", "\r\n"), "  " + prompt.replace("    ", "\t")):
        assert not (changed + REPLY).startswith(prompt)
        assert one(changed + REPLY, prompt).item["source"] == ANSWER
        silent = one(changed + NO_CODE, prompt)
        assert silent.item is None and silent.verdict["reward"] == 0.0


def test_a_token_before_the_prompt_or_a_changed_character_inside_it(prompt):
    """A BOS token decoded before the prompt; a character inside the prompt that came back otherwise
    (a byte-level token cut mid-character): the prompt's last turn still marks where the response starts."""
    for query_prompt in ("<s>" + prompt, prompt.replace("reference", "r\ufffdference", 1),
                         prompt[len(prompt) // 2:].replace("Reference", "\ufffd", 1)):
        assert one(query_prompt + REPLY, prompt).item["source"] == ANSWER
        assert one(query_prompt + NO_CODE, prompt).item is None


def test_a_response_that_cannot_be_found_earns_zero_with_the_reason(prompt):
    """A query that holds neither the prompt, nor its end, nor its last turn: nothing of it is judged,
    not even the reference code it holds."""
    other = prompt.replace("<|im_start|>assistant\n", "<|im_start|>helper\n")[: len(prompt) // 2]
    found = one(other + REPLY, prompt.replace("all_reduce", "all_gather"))
    assert found.item is None and found.verdict["status"] == "invalid_sample" and found.verdict["reward"] == 0.0
    assert "cannot be told from the prompt" in found.verdict["error"]


def test_without_prompts_the_query_s_last_assistant_turn_is_the_response(prompt):
    assert one(prompt + REPLY, None).item["source"] == ANSWER
    for marker in ("<|start_header_id|>assistant<|end_header_id|>\n\n", "[INST] write it [/INST]", "<|assistant|>\n"):
        assert one("a prompt with the reference: ```python\ndef solution(x):\n    return x\n```" + marker + REPLY,
                   None).item["source"] == ANSWER
    bare = one("no template here ```python\ndef solution(x):\n    return x\n```", None)
    assert bare.item is None and "no prompts" in bare.verdict["error"]


def test_a_bad_label_is_that_rollout_s_zero_with_the_reason(prompt):
    for label, needle in (("", "--data.label_key"), ('{"backend": "cuda"}', "names no problem"),
                          ("{not json", "names no problem")):
        found = one(prompt + REPLY, prompt, label)
        assert found.item is None and found.verdict["status"] == "invalid_label" and needle in found.verdict["error"]
    # a backend is checked where the service knows its backends (an item here, refused there)
    assert one(prompt + REPLY, prompt, "all_reduce:cuda").item["backend"] == "cuda"


def test_the_answer_has_openrlhf_s_shape_and_says_what_was_judged():
    judged = {"reward": 0.7, "correct": True, "speedup": 1.3, "status": "correct"}
    unjudged = {"reward": 0.0, "correct": False, "speedup": None, "status": "busy", "error": "no room"}
    answer = openrlhf.answer([judged, unjudged])
    assert answer["rewards"] == answer["scores"] == [0.7, 0.0]
    assert answer["extra_logs"] == {"correct": [1.0, 0.0], "speedup": [1.3, -1.0], "judged": [1.0, 0.0]}
    for bad in ({"query": ["a"], "labels": ["x"], "prompts": ["p", "q"]}, {"query": [1], "labels": ["x"]}, ["a"]):
        with pytest.raises(ValueError):
            openrlhf.rollouts(bad)
