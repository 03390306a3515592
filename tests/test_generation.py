"""Generation against a real HTTP server on loopback that speaks chat-completions (tests/fake_endpoint.py):
retries, malformed replies, replies without code, limits, the prompt, and a sweep with two refinement rounds."""

import os
import subprocess
import sys
import threading
import time

import pytest

import wandb_files
from conftest import REPO
from fake_endpoint import Endpoint, code_reply, completion
from pkb_ray.generate.llm import ChatClient, GenerationError, RateLimiter, extract_code
from pkb_ray.generate.prompt import feedback, messages
from pkb_ray.generate.samples import read_samples
from pkb_ray.problem import load_problems
from pkb_ray.results.parquet import read_results
from pkb_ray.spec.config import ModelConfig, SweepConfig

REFERENCE = (REPO / "problems" / "all_reduce.py").read_text()
CORRECT = (REPO / "samples/replay/all_reduce/00_reference_copy.py").read_text()
WRONG = (REPO / "samples/replay/all_reduce/03_average_not_sum.py").read_text()


def model(base_url: str, **kw) -> ModelConfig:
    return ModelConfig(name="fake", provider="openai", base_url=base_url, model_id="fake-model", api_key_env=None,
                       **kw)


def test_the_clients_retries_honour_retry_after_on_429_then_back_off_on_500():
    script = [(429, {"error": {"message": "slow down"}}, {"Retry-After": "1.5"}),
              (500, {"error": {"message": "oops"}}),
              (200, code_reply("def solution(x):\n    return x.clone()"))]
    with Endpoint(lambda body, n: script[n]) as ep:
        reply = ChatClient(model(ep.base_url, max_retries=3)).complete([{"role": "user", "content": "hi"}], seed=7)
    assert reply.attempts == 3 and reply.prompt_tokens == 100 and reply.completion_tokens == 50
    waits = [b - a for a, b in zip(ep.arrivals, ep.arrivals[1:])]
    assert waits[0] >= 1.45 and waits[1] < 1.45  # the server's 1.5 s, then the client's own backoff (<= 1 s)
    assert len(ep.requests) == 3 and ep.requests[0]["seed"] == 7 and ep.requests[0]["model"] == "fake-model"
    assert ep.requests[0]["max_tokens"] == 8192 and "max_completion_tokens" not in ep.requests[0]
    assert extract_code(reply.content)[0].startswith("def solution(x):")


def test_a_permanent_500_becomes_a_sample_with_its_generation_error():
    from pkb_ray.generate.stage import Generator

    req = {"problem_id": "all_reduce", "backend": "torch", "model": "fake", "sample_index": 0, "round": 0,
           "seed": 3, "messages": '[{"role": "user", "content": "x"}]', "parent_key": "", "feedback": ""}
    with Endpoint(lambda body, n: (500, {"error": {"message": "down for good"}})) as ep:
        row = Generator(model(ep.base_url, max_retries=1)).row(req)
    assert len(ep.requests) == 2 and row["source"] == "" and row["problem_id"] == "all_reduce"
    assert row["metadata"]["generation_error"].startswith("generation failed: request failed after 2 attempts: "
                                                          "InternalServerError")
    assert "down for good" in row["metadata"]["generation_error"]


def test_reasoning_models_get_max_completion_tokens():
    with Endpoint(lambda body, n: (200, code_reply("def solution(x):\n    return x"))) as ep:
        ChatClient(model(ep.base_url, max_tokens=1000, max_tokens_field="max_completion_tokens")).complete(
            [{"role": "user", "content": "x"}])
    assert ep.requests[0]["max_completion_tokens"] == 1000 and "max_tokens" not in ep.requests[0]


def test_gives_up_after_max_retries_and_does_not_retry_a_client_error():
    with Endpoint(lambda body, n: (503, {"error": {"message": "overloaded"}})) as ep:
        with pytest.raises(GenerationError, match="after 3 attempts"):
            ChatClient(model(ep.base_url, max_retries=2)).complete([{"role": "user", "content": "x"}])
    assert len(ep.requests) == 3
    with Endpoint(lambda body, n: (400, {"error": {"message": "bad request"}})) as ep:
        with pytest.raises(GenerationError, match="BadRequest"):
            ChatClient(model(ep.base_url, max_retries=5)).complete([{"role": "user", "content": "x"}])
    assert len(ep.requests) == 1


@pytest.mark.parametrize("body", [b"this is not json", {"id": "x", "choices": []}])
def test_a_malformed_reply_is_a_clear_error(body):
    with Endpoint(lambda b, n: (200, body)) as ep:
        with pytest.raises(GenerationError, match="malformed|failed"):
            ChatClient(model(ep.base_url, max_retries=0)).complete([{"role": "user", "content": "x"}])


def test_code_is_taken_from_the_last_block_that_defines_solution():
    reply = ("First try:\n```python\ndef helper():\n    pass\n```\nBetter:\n```python\nimport torch\n\n"
             "def solution(x):\n    return x\n```\n```bash\nrun it\n```")
    code, why = extract_code(reply)
    assert code == "import torch\n\ndef solution(x):\n    return x\n" and why == ""
    assert extract_code("I cannot do that.") == (None, "the reply has no Python code block")
    assert extract_code("```python\nx = 1\n```")[0] is None


def test_concurrency_and_rate_limits_are_respected():
    cfg = model("http://unused", concurrency=3, requests_per_second=20.0)
    with Endpoint(lambda body, n: (200, code_reply("def solution(x):\n    return x"), {}, 0.3)) as ep:
        client = ChatClient(model(ep.base_url, concurrency=3, requests_per_second=20.0))
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(cfg.concurrency) as pool:
            list(pool.map(lambda i: client.complete([{"role": "user", "content": str(i)}]), range(9)))
    assert 2 <= ep.max_in_flight <= 3  # never above the limit, and requests did run side by side
    # the token bucket: in any window, at most burst + rate * window requests arrive
    limiter = RateLimiter(5.0, burst=2)
    stamps = []
    threads = [threading.Thread(target=lambda: (limiter.acquire(), stamps.append(time.monotonic()))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stamps.sort()
    for i in range(len(stamps)):
        for j in range(i + 1, len(stamps)):
            assert j - i + 1 <= 2 + 5.0 * (stamps[j] - stamps[i]) + 1e-6


def test_prompt_has_the_task_reference_backend_notes_example_and_hardware():
    problems = load_problems()
    cfg = SweepConfig.model_validate({"hardware": {"name": "h200_2", "device": "cuda", "world_sizes": [2],
                                                   "gpus_per_node": 2, "arch": "sm_90a", "link_gbps": 450.0,
                                                   "nvlink_multicast": False}, "eval": {"size": "default"}})
    system, user = messages(problems["gemm_reduce_scatter"], "cuda", cfg)
    text = user["content"]
    assert system["role"] == "system" and user["role"] == "user"
    assert "solution(x, w)" in text and "2 ranks" in text and "450 GB/s" in text and "multicast off" in text
    assert problems["gemm_reduce_scatter"].source().strip()[:200] in text  # the reference, verbatim
    assert "load_cuda" in text and "pkb_ray/peer.cuh" in text  # the CUDA backend's notes
    assert "sum_peers" in text  # the worked example (kernels/all_reduce/02_cuda_one_shot.py)
    assert "tokens_per_rank=1024" in text and "atol=0.0001" in text
    # the all-reduce problem is not shown its own expert kernel as the example
    assert "sum_peers" not in messages(problems["all_reduce"], "cuda", cfg)[1]["content"]
    note = feedback({"status": "wrong_output", "message": "trial seed=3 rank 1: output: 17 of 4096 elements differ",
                     "failed_rank": 1, "world_size": 2}, cfg, 1.0)
    assert "wrong_output" in note and "rank 1" in note and "17 of 4096" in note


def test_refinement_feedback_is_about_the_size_where_a_swept_sample_did_worst():
    import pandas as pd

    from pkb_ray.generate.prompt import feedback
    from pkb_ray.generate.stage import worst_per_sample
    from pkb_ray.spec.config import SweepConfig

    def row(index, size, status, speedup=None, w=2):
        return dict(model="m", problem_id="all_reduce", sample_index=index, world_size=w, size=size, status=status,
                    speedup=speedup, ref_time_us=10.0, cand_time_us=10.0 / speedup if speedup else None,
                    message="" if status == "correct" else f"broke at {size}")
    rows = pd.DataFrame([row(0, "small", "correct", 2.0), row(0, "numel=1048576", "wrong_output"),
                         row(0, "numel=4096", "correct", 3.0),
                         row(1, "small", "correct", 2.0), row(1, "numel=1048576", "correct", 0.8),
                         row(2, "small", "correct", 0.5, w=4), row(2, "small", "correct", 0.5, w=2)])
    worst = worst_per_sample(rows).set_index("sample_index")
    assert worst.loc[0, "size"] == "numel=1048576" and worst.loc[0, "status"] == "wrong_output"
    assert worst.loc[1, "size"] == "numel=1048576" and worst.loc[1, "speedup"] == 0.8  # its slowest size
    assert worst.loc[2, "world_size"] == 2 and worst.loc[2, "sizes_evaluated"] == 1
    assert worst.loc[0, "sizes_evaluated"] == 3
    cfg = SweepConfig.model_validate({"hardware": {"name": "h", "device": "cuda", "world_sizes": [2],
                                                   "gpus_per_node": 2, "arch": "sm_90a"}})
    failed = feedback(worst.loc[0].to_dict(), cfg, 1.0)
    assert "At input size numel=1048576 (of the 3 sizes it was evaluated at, one where it failed)" in failed
    assert "broke at numel=1048576" in failed
    slow = feedback(worst.loc[1].to_dict(), cfg, 1.0)
    assert "At input size numel=1048576 (of the 2 sizes" in slow and "slowest" in slow and "0.80x" in slow
    assert "At input size" not in feedback(worst.loc[2].to_dict(), cfg, 1.0)  # one size: nothing to say


def test_prompt_cli_prints_one():
    done = subprocess.run([sys.executable, "-m", "pkb_ray.generate.prompt", "problem=all_gather", "backend=triton"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "===== user =====" in done.stdout and "tl.pointer_type" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "pkb_ray.generate.prompt", "problem=nope"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "unknown id 'nope'" in bad.stderr


def _scripted_model(body: dict, n: int):
    """Round 0: sample 0 answers with a wrong all-reduce, sample 1 with prose only. After feedback
    (a conversation longer than system + user), both answer correctly."""
    msgs = body["messages"]
    if len(msgs) > 2:
        assert msgs[2]["role"] == "assistant" and msgs[3]["role"] == "user"
        return 200, code_reply(CORRECT)
    if body.get("seed") == 0:
        return 200, code_reply(WRONG)
    return 200, completion("I would use a one-shot kernel, but I am not sure how to write it.")


def test_sweep_generates_evaluates_and_refines_over_two_rounds(tmp_path, shared_ray):
    secret = "sk-test-do-not-leak-123"
    env = shared_ray.env(dict(os.environ, RAY_DISABLE_USAGE_STATS="1", PKB_FAKE_KEY=secret))
    run_dir = tmp_path / "run"
    with Endpoint(_scripted_model) as ep:
        done = subprocess.run(
            [sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={run_dir}", "ray.include_dashboard=false",
             "model=vllm_local", f"model.base_url={ep.base_url}", "model.name=fake", "model.api_key_env=PKB_FAKE_KEY",
             "model.samples_per_problem=2", "model.refine_rounds=2", "model.concurrency=2", "backend=torch",
             "model.refine_below_speedup=0.01",  # a copy of the reference is as fast: only failures go back
             "problems.ids=[all_reduce]", "eval.timeout_s=10", "eval.rounds=20", f"cache_dir={tmp_path / 'cache'}",
             *shared_ray.overrides(2)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    # 2 first answers, then only the 2 that failed went back, once: round 2 had nothing left to refine
    assert len(ep.requests) == 4 and all(a == f"Bearer {secret}" for a in ep.auth)
    generated = read_samples(run_dir / "generated")
    assert sorted(int(r["metadata"]["round"]) for r in generated) == [0, 0, 1, 1]
    first = {r["sample_index"]: r for r in generated if r["metadata"]["round"] == "0"}
    assert first[0]["metadata"]["completion_tokens"] == "50" and "```python" in first[0]["metadata"]["raw_reply"]
    assert "no Python code block" in first[1]["metadata"]["generation_error"]
    df = read_results(run_dir / "results")
    status = {(int(r["round"]), r["sample_index"]): r["status"] for r in df.to_dict("records")}
    assert status == {(0, 0): "wrong_output", (0, 1): "invalid_sample", (1, 0): "correct", (1, 1): "correct"}
    assert "pass@1 after each" not in done.stdout  # (the W&B plot title)
    assert "after each refinement round" in done.stdout
    rounds = done.stdout.split("after each refinement round:")[1].splitlines()
    col = next(line for line in rounds if "pass@1" in line).split().index("pass@1")  # cells: "0 [0, 0.658]"
    pass1 = {line.split()[1]: float(line.split()[col]) for line in rounds
             if line.split()[:1] == ["fake"]}
    assert pass1 == {"0": 0.0, "1": 1.0}
    summary = wandb_files.summary(next((run_dir / "wandb").glob("offline-run-*/run-*.wandb")))
    assert summary["round0/pass@1"] == 0.0 and summary["round1/pass@1"] == 1.0 and summary["pass@1"] == 1.0
    # the key went to the server and nowhere else: not in configs, logs, W&B files or Parquet
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == [] and secret not in done.stdout + done.stderr

    # the same sweep again with the generated folder: nothing is asked twice
    with Endpoint(_scripted_model) as ep2:
        again = subprocess.run(
            [sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={tmp_path / 'run2'}", "ray.include_dashboard=false",
             "model=vllm_local", f"model.base_url={ep2.base_url}", "model.name=fake", "model.api_key_env=PKB_FAKE_KEY",
             "model.samples_per_problem=2", "model.refine_rounds=2", "model.refine_below_speedup=0.01",
             "backend=torch", "problems.ids=[all_reduce]", "eval.timeout_s=10", "eval.rounds=20",
             f"cache_dir={tmp_path / 'cache'}",
             f"generated_dir={run_dir / 'generated'}", f"results_dir={run_dir / 'results'}", *shared_ray.overrides(2)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert ep2.requests == [] and (again.stdout + again.stderr).count("nothing left to evaluate") == 2  # the first round, and round 1


def test_a_missing_api_key_fails_at_start_naming_the_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PKB_ABSENT_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={tmp_path / 'run'}", "model=vllm_local",
         "model.api_key_env=PKB_ABSENT_KEY", "problems.ids=[all_reduce]"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "PKB_ABSENT_KEY is not set" in done.stderr
    assert not (tmp_path / "run" / "generated").exists()
