"""``pkb-ray serve`` for real: the command in its own process, joined to the session's Ray, gloo ranks
in the sandbox, called over HTTP on loopback (httpx), by the Python client, by the verl adapter and
in OpenRLHF's request shape.

The module's one service answers every test; the last one stops it with Ctrl-C.
"""

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from conftest import REPO, as_from_a_terminal
from pkb_ray.results.parquet import read_results

pytestmark = pytest.mark.slow

REPLAY = REPO / "samples" / "replay"
TOKEN = "test-token-7f3a"
TIMEOUT_S = 10  # eval.timeout_s: what a hanging sample costs
# shipped samples whose verdicts the service must give as a sweep does (status per file)
SAME_AS_A_SWEEP = ["all_reduce/00_reference_copy.py", "all_reduce/03_average_not_sum.py",
                   "all_reduce/07_mutates_input.py", "all_reduce/08_cuda_nvcc_error.py",
                   "all_reduce/09_rewrites_timer.py", "all_gather/00_reference_copy.py"]


@dataclass
class Service:
    url: str
    proc: subprocess.Popen
    folder: Path
    lines: list[str] = field(default_factory=list)

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {TOKEN}"}

    def post(self, path: str, body=None, content: bytes | None = None, auth: bool = True, timeout: float = 120):
        headers = self.headers if auth else {}
        if content is not None:
            return httpx.post(self.url + path, content=content, headers={**headers, "Content-Type": "application/json"},
                              timeout=timeout)
        return httpx.post(self.url + path, json=body, headers=headers, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _backend(path: Path) -> str:
    found = re.search(r"^# backend: (\w+)", path.read_text(), re.MULTILINE)
    return found.group(1) if found else "torch"


def _item(rel: str, **extra) -> dict:
    path = REPLAY / rel
    return {"problem_id": path.parent.name, "source": path.read_text(), "backend": _backend(path), **extra}


def _variant(rel: str, n: int) -> dict:
    """The same sample as another cache key (a comment line added)."""
    found = _item(rel)
    return {**found, "source": f"# variant {n}\n{found['source']}"}


@pytest.fixture(scope="module")
def service(shared_ray, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    (tmp / "token").write_text(TOKEN + "\n")
    port = _free_port()
    cmd = [sys.executable, "-m", "pkb_ray.cli", "serve", *shared_ray.overrides(2), f"serve.port={port}",
           f"serve.dir={tmp / 'service'}", f"serve.token_file={tmp / 'token'}", f"eval.timeout_s={TIMEOUT_S}",
           "eval.rounds=10", "serve.max_pending=12", f"cache_dir={tmp / 'cache'}"]
    proc = subprocess.Popen(cmd, cwd=tmp, env=shared_ray.env(dict(os.environ, RAY_DISABLE_USAGE_STATS="1")),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    svc = Service(f"http://127.0.0.1:{port}", proc, tmp / "service")
    ready = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            svc.lines.append(line)
            if line.startswith("pkb_ray serve: http://"):
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(300):
        proc.kill()
        pytest.fail("the service did not start:\n" + "".join(svc.lines[-60:]))
    yield svc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)


def test_it_says_where_it_listens_and_answers_health(service):
    line = next(x for x in service.lines if x.startswith("pkb_ray serve: http://"))
    assert f"{service.url}/docs" in line and "gang(s) ready" in line
    health = httpx.get(service.url + "/healthz").json()  # no token needed for health
    assert health["ok"] and health["gangs_ready"] >= 1 and health["evaluator_version"]
    assert httpx.get(service.url + "/openapi.json").json()["paths"].keys() >= {"/v1/verify", "/v1/verify_batch"}


def test_served_verdicts_are_a_sweeps(service, shared_ray, tmp_path):
    """The same samples through ``pkb-ray sweep`` and through the service: the same statuses."""
    samples = tmp_path / "samples"
    for rel in SAME_AS_A_SWEEP:
        (samples / rel).parent.mkdir(parents=True, exist_ok=True)
        (samples / rel).write_text((REPLAY / rel).read_text())
    run = subprocess.run([sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={tmp_path / 'run'}",
                          f"model.samples={samples}", "wandb=disabled", f"eval.timeout_s={TIMEOUT_S}", "eval.rounds=10",
                          f"cache_dir={tmp_path / 'cache'}", *shared_ray.overrides(2)],
                         cwd=tmp_path, env=shared_ray.env(dict(os.environ, RAY_DISABLE_USAGE_STATS="1")),
                         capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    swept = read_results(tmp_path / "run" / "results")
    by_file = {}
    for rel in SAME_AS_A_SWEEP:
        index = int(Path(rel).name.split("_")[0])  # a replay file's number is its sample index
        row = swept[(swept.problem_id == Path(rel).parent.name) & (swept.sample_index == index)].iloc[0]
        by_file[rel] = row.status
    served = service.post("/v1/verify_batch", {"items": [_item(rel) for rel in SAME_AS_A_SWEEP]}).json()["results"]
    assert {rel: r["status"] for rel, r in zip(SAME_AS_A_SWEEP, served)} == by_file, \
        [(rel, r.get("message", "")[:300]) for rel, r in zip(SAME_AS_A_SWEEP, served)]
    assert set(by_file.values()) >= {"correct", "wrong_output", "compile_error", "tampering"}
    honest = served[0]
    # the reference handed back: correct, timed, and worth nothing (serve.reward.copy_reward)
    assert honest["correct"] and honest["speedup"] > 0 and honest["reference_copy"] and honest["reward"] == 0.0
    lo, hi = honest["speedup_interval"]
    assert lo <= honest["speedup"] <= hi
    wrong = served[1]
    assert wrong["reward"] == 0.0 and "rank" in wrong["feedback"] and "max abs error" in wrong["feedback"]
    assert "nvcc" in served[3]["feedback"] or "error" in served[3]["feedback"]


def test_a_repeated_sample_answers_from_the_cache_and_the_history_reads_as_a_run(service, tmp_path):
    item = _variant("all_reduce/01_one_shot.py", 100)
    first = service.post("/v1/verify", item).json()
    t = time.monotonic()
    again = service.post("/v1/verify", item).json()
    assert (first["cached"], again["cached"]) == (False, True) and time.monotonic() - t < 5
    assert {k: again[k] for k in ("status", "speedup", "reward", "sample_key")} == \
        {k: first[k] for k in ("status", "speedup", "reward", "sample_key")}
    time.sleep(1.0)  # the results sink writes within about a second
    df = read_results(service.folder / "results")
    assert first["sample_key"] in set(df.sample_key) and set(df.model) == {"served"}
    from pkb_ray.summary.cli import main as report

    assert report([str(service.folder / "results"), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.html").exists()


def test_bad_requests_get_a_clear_4xx(service):
    ok = _item("all_reduce/00_reference_copy.py")
    cases = [
        (dict(content=b'{"problem_id": "all_reduce", "source": '), 400, "malformed JSON"),
        (dict(body={"problem_id": "all_reduce"}), 422, "source: Field required"),
        (dict(body={**ok, "backend": "fortran"}), 422, "backend: Input should be"),
        (dict(body={**ok, "problem_id": "all_reduc"}), 404, "did you mean all_reduce"),
        (dict(body={**ok, "source": "x" * 300_000}), 413, "serve.max_source_bytes"),
        (dict(body=ok, auth=False), 401, "bearer token"),
    ]
    for kwargs, code, needle in cases:
        reply = service.post("/v1/verify", **kwargs)
        assert reply.status_code == code and needle in reply.json()["error"], (code, reply.text)
    batch = service.post("/v1/verify_batch", {"items": [ok, {**ok, "problem_id": "nope_at_all"}]})
    assert batch.status_code == 404 and batch.json()["error"].startswith("items[1]: unknown problem_id")
    wrong_token = httpx.post(service.url + "/v1/verify", json=ok, headers={"Authorization": "Bearer guess"})
    assert wrong_token.status_code == 401
    assert httpx.get(service.url + "/healthz").json()["ok"]  # none of it disturbed the service


def test_problems_list_their_signature_and_prompt(service):
    problems = httpx.get(service.url + "/v1/problems", headers=service.headers, timeout=60).json()["problems"]
    by_id = {p["id"]: p for p in problems}
    assert "all_reduce" in by_id and by_id["all_reduce"]["signature"] and by_id["all_reduce"]["world_sizes"] == [2]
    assert "solution" in by_id["all_reduce"]["prompt"][-1]["content"]
    one = httpx.get(service.url + "/v1/problems/all_gather?backend=cuda", headers=service.headers).json()
    assert one["id"] == "all_gather" and "CUDA" in one["prompt"][-1]["content"]


def test_the_client_and_the_trainer_adapters(service, monkeypatch):
    from pkb_ray import AsyncRewardClient, RewardClient, ServiceError
    from pkb_ray.serve.adapters.verl import compute_score, compute_score_batch

    copy = _item("all_reduce/00_reference_copy.py")
    with RewardClient(service.url, token=TOKEN) as client:
        assert client.verify(**copy)["correct"]
        assert [r["status"] for r in client.verify_batch([copy, _item("all_reduce/04_wrong_dtype.py")])] == \
            ["correct", "wrong_output"]
        with pytest.raises(ServiceError, match="404"):
            client.verify("nope", "x")

    async def asynchronous():
        async with AsyncRewardClient(service.url, token=TOKEN) as client:
            return await asyncio.gather(client.verify(**copy), client.health())

    verdict, health = asyncio.run(asynchronous())
    assert verdict["cached"] and health["ok"]
    # verl: its custom reward function's call, on a completion as a model writes it
    completion = f"Here is a faster version.\n```python\n{copy['source']}```\n"
    scored = compute_score("pkb_ray", completion, "all_reduce", {"sample_id": "step3-7"}, url=service.url, token=TOKEN)
    assert scored["correct"] == 1.0 and scored["status"] == "correct"
    assert scored["reference_copy"] == 1.0 and scored["score"] == 0.0  # a copy of the prompt's reference
    assert compute_score("pkb_ray", "no code here", "all_reduce", None, url=service.url, token=TOKEN)["score"] == 0.0
    batch = compute_score_batch(["pkb_ray"] * 2, [completion, "nothing"], ["all_reduce", "all_reduce"], [None, None],
                                url=service.url, token=TOKEN)
    assert [b["status"] for b in batch] == ["correct", "invalid_sample"]
    # OpenRLHF: the request its remote reward model sends (query = prompt + response), rewards back
    prompt = "<|user|>Write all_reduce.<|assistant|>"
    body = {"query": [prompt + completion, prompt + "sorry"], "prompts": [prompt, prompt],
            "labels": ["all_reduce", "all_reduce"]}
    answer = service.post("/openrlhf/reward", body).json()
    assert answer["rewards"] == [0.0, 0.0] and len(answer["scores"]) == 2
    assert answer["verdicts"][0]["correct"] and answer["verdicts"][0]["reference_copy"]  # judged, a copy


def test_load_every_request_answered_within_its_deadline(service):
    """200 requests, 16 at a time: honest, wrong, hanging and malformed, repeats among them; 429s are
    retried after their Retry-After. None is lost, none outlives its deadline, the service is
    healthy after."""
    deadline = 45.0
    valid = [_variant("all_reduce/00_reference_copy.py", n) for n in range(6)] + \
            [_variant("all_reduce/03_average_not_sum.py", n) for n in range(4)] + \
            [_variant("all_reduce/05_hangs_on_rank1.py", n) for n in range(2)]
    malformed = [{"problem_id": "all_reduce"}, {"problem_id": "unknown_problem", "source": "x"},
                 {"problem_id": "all_reduce", "source": "x", "backend": "cobol"}]
    plan = [("valid", valid[i % len(valid)]) if i % 5 else ("malformed", malformed[i % 3]) for i in range(200)]
    answers: list[tuple[str, int, float, dict]] = []
    busy = []

    async def one(client, kind, body):
        start = time.monotonic()
        while True:
            reply = await client.post(service.url + "/v1/verify", json={**body, "deadline_s": deadline},
                                      headers=service.headers)
            if reply.status_code != 429:
                break
            busy.append(float(reply.headers["retry-after"]))
            await asyncio.sleep(min(2.0, float(reply.headers["retry-after"])))
        answers.append((kind, reply.status_code, time.monotonic() - start, reply.json()))

    async def run():
        gate = asyncio.Semaphore(16)
        async with httpx.AsyncClient(timeout=300) as client:
            async def gated(kind, body):
                async with gate:
                    await one(client, kind, body)
            await asyncio.gather(*(gated(kind, body) for kind, body in plan))

    asyncio.run(run())
    assert len(answers) == 200
    codes = {}
    for kind, code, _, _ in answers:
        codes.setdefault(kind, set()).add(code)
    assert codes["malformed"] <= {404, 422} and codes["valid"] <= {200, 504}, codes
    statuses = {a[3].get("status") for a in answers if a[0] == "valid" and a[1] == 200}
    assert statuses >= {"correct", "wrong_output", "timeout"}, statuses
    # a single request waits at most its deadline (a 429's retries start it again, so they are out)
    late = [a for a in answers if a[1] == 504]
    assert all(a[3]["status"] == "deadline_exceeded" for a in late)
    health = httpx.get(service.url + "/healthz").json()
    assert health["ok"] and health["gangs_ready"] >= 1
    end = time.monotonic() + 60
    while httpx.get(service.url + "/healthz").json()["pending"] and time.monotonic() < end:
        time.sleep(0.5)
    assert httpx.get(service.url + "/healthz").json()["pending"] == 0
    print(json.dumps({"codes": {k: sorted(v) for k, v in codes.items()}, "busy_answers": len(busy),
                      "slowest_s": round(max(a[2] for a in answers), 1)}))


def test_a_dead_gang_is_replaced_and_its_request_answered(service, shared_ray):
    import ray

    hang = _variant("all_reduce/05_hangs_on_rank1.py", 99)
    with httpx.Client(timeout=120) as client:
        asked = {}
        thread = threading.Thread(target=lambda: asked.update(
            reply=client.post(service.url + "/v1/verify", json=hang, headers=service.headers)))
        thread.start()
        time.sleep(4.0)  # the hanging sample is on its gang now
        with shared_ray.joined():
            space = _service_namespace()
            gangs = [a for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["namespace"] == space and a["name"].startswith("gang-")]
            assert gangs, ray.util.list_named_actors(all_namespaces=True)
            for gang in gangs:
                ray.kill(ray.get_actor(gang["name"], namespace=space))
        thread.join(120)
    verdict = asked["reply"].json()
    assert asked["reply"].status_code == 200 and verdict["status"] == "crash" and "died" in verdict["message"]
    again = service.post("/v1/verify", _item("all_reduce/00_reference_copy.py")).json()  # on the new gang
    assert again["status"] == "correct"
    retried = service.post("/v1/verify", hang).json()  # a gang's death is not the sample's verdict: not cached
    assert retried["cached"] is False and retried["status"] == "timeout"


def _service_namespace() -> str:
    """The namespace of the service's replica, where its gangs and compile actors are named."""
    import ray

    return next(a["namespace"] for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith("serve-compile-"))


def test_ctrl_c_stops_it_cleanly_abandoning_queued_work(service, shared_ray):
    """Ctrl-C with hanging samples queued and being evaluated: it stops without evaluating them (each
    would cost eval.timeout_s, and a busy gang cannot answer a polite stop), and leaves nothing."""
    import ray

    with shared_ray.joined():
        space = _service_namespace()
    hang = _item("all_reduce/05_hangs_on_rank1.py")
    hangs = [{**hang, "source": f"# abandoned {n}\n{hang['source']}"} for n in range(6)]
    sent = [threading.Thread(target=lambda item=item: _quietly(service.post, "/v1/verify", item, timeout=300),
                             daemon=True) for item in hangs]
    for thread in sent:
        thread.start()
    deadline = time.monotonic() + 60
    while httpx.get(service.url + "/healthz").json()["pending"] < len(hangs) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # the first ones reach the gangs
    os.killpg(service.proc.pid, signal.SIGINT)
    # six hangs finished one after another would take 6 x TIMEOUT_S / gangs, plus 60 s a busy gang's stop
    try:
        code = service.proc.wait(2 * TIMEOUT_S + 30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still stopping:\n{_stuck(service)}")
    assert code == 0, "".join(service.lines[-40:])
    assert any("stopping" in line for line in service.lines)
    stored = read_results(service.folder / "results")
    assert not stored["source"].str.startswith("# abandoned").any()  # abandoned, not evaluated
    with shared_ray.joined():  # Serve's own actors, the gangs and the compile actors are gone
        left = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] in ("serve", space)]
    assert left == [], left


def _stuck(service) -> str:
    """What a service that does not stop is doing: its signal masks and every thread's stack."""
    pid = service.proc.pid
    status = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
              if line.split(":")[0] in ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt", "Threads")]
    os.kill(pid, signal.SIGUSR1)  # faulthandler's dump (pkb_ray/serve/main.py)
    time.sleep(3)
    return "\n".join(status) + "\n" + "".join(service.lines[-200:])


def _quietly(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except httpx.HTTPError:  # the service went away under it
        pass
