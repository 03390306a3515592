"""``pkb-ray serve`` as trainers meet it (issue 65): OpenRLHF's burst of one request per rollout,
its labels and decoded queries, errors as HTTP means them (504, 503, 429, item by item in a batch),
API docs without a CDN, and a second service refused on the first one's port.

The service runs in its own process on a local Ray of its own (not the session's shared cluster:
tests/test_serve_on_cpu.py may run a service there at the same time, and a Ray cluster holds one),
with a small ``serve.max_pending``, one compile actor, no token (OpenRLHF sends none), on loopback.
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

import aiohttp
import httpx
import pytest

from conftest import REPO, as_from_a_terminal

pytestmark = pytest.mark.slow

REPLAY = REPO / "samples" / "replay"
TIMEOUT_S = 10  # eval.timeout_s: what a hanging sample costs
MAX_PENDING = 2
HONEST, WRONG = "all_reduce/00_reference_copy.py", "all_reduce/03_average_not_sum.py"
HANGS, CUDA = "all_reduce/05_hangs_on_rank1.py", "all_reduce/08_cuda_nvcc_error.py"
PROMPT = ("<|im_start|>system\nYou write fast multi-GPU kernels.<|im_end|>\n<|im_start|>user\nRewrite the reference:\n"
          "```python\nimport torch.distributed as dist\n\ndef solution(x):\n    out = x.clone()\n"
          "    dist.all_reduce(out)\n    return out\n```\n<|im_end|>\n<|im_start|>assistant\n")


@dataclass
class Service:
    url: str
    proc: subprocess.Popen
    folder: Path
    lines: list[str] = field(default_factory=list)

    def post(self, path: str, body, timeout: float = 120) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=timeout)

    def idle(self, timeout_s: float = 120) -> None:
        """Wait until nothing is pending (hanging samples of a test must not slow the next one)."""
        end = time.monotonic() + timeout_s
        while httpx.get(self.url + "/healthz").json()["pending"]:
            assert time.monotonic() < end, "the service still has pending requests"
            time.sleep(0.5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _source(rel: str, n: int) -> str:
    """A replay sample as another cache key (a comment line added)."""
    return f"# variant {n}\n{(REPLAY / rel).read_text()}"


def _item(rel: str, n: int, **extra) -> dict:
    backend = "cuda" if rel == CUDA else "torch"
    return {"problem_id": "all_reduce", "source": _source(rel, n), "backend": backend, **extra}


def _reply(source: str) -> str:
    return f"Here is my version.\n```python\n{source}```<|im_end|>"


def _command(port: int, folder: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pkb_ray.cli", "serve", f"serve.port={port}", f"serve.dir={folder / 'service'}",
            f"eval.timeout_s={TIMEOUT_S}", "eval.rounds=10", f"serve.max_pending={MAX_PENDING}",
            "serve.compile_workers=1", "ray.include_dashboard=false", f"cache_dir={folder / 'cache'}", *extra]


def _env() -> dict:
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1", RAY_AUTH_MODE="disabled")
    env.pop("PKB_RAY_SERVE_TOKEN", None)
    return env


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve_trainers")
    port = _free_port()
    proc = subprocess.Popen(_command(port, tmp), cwd=tmp, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    svc = Service(f"http://127.0.0.1:{port}", proc, tmp)
    ready = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            svc.lines.append(line)
            if line.startswith("pkb_ray serve: http://"):
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(300):
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the service did not start:\n" + "".join(svc.lines[-60:]))
    yield svc
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the service, its gangs and its local Ray stop
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def test_the_api_docs_load_without_a_cdn(service):
    for page in ("/docs", "/redoc"):
        html = httpx.get(service.url + page).text
        assets = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert assets and not [a for a in assets if not a.startswith("/")], (page, assets)  # this service's own
        assert "fonts.googleapis" not in html and "cdn." not in html
        for asset in assets:
            reply = httpx.get(service.url + asset)
            assert reply.status_code == 200 and len(reply.content) > 1000, (asset, reply.status_code)
    assert "SwaggerUIBundle" in httpx.get(service.url + "/docs-assets/swagger-ui-bundle.js").text
    missing = httpx.get(service.url + "/docs-assets/core.py")  # only the four files are served
    assert missing.status_code == 404 and "no such file" in missing.json()["error"]


def test_labels_and_unfound_responses_get_zero_with_the_reason(service):
    """One OpenRLHF request: a good rollout is judged while a bad backend, an unknown problem and a
    query whose response cannot be found (nor holds code) each get 0 and why; a /v1 request with an
    unknown backend is a 422 and an unknown path a JSON 404."""
    honest = _source(HONEST, 1)
    truncated = PROMPT[len(PROMPT) // 3:]  # left-truncated: begins inside the prompt, reference block and all
    body = {"query": [PROMPT + _reply(honest), PROMPT + _reply(honest), PROMPT + _reply(honest),
                      truncated + "I cannot write this one.<|im_end|>"],
            "prompts": [PROMPT] * 4, "labels": ["all_reduce", "all_reduce:cpp", "all_reduc", "all_reduce"]}
    reply = service.post("/openrlhf/reward", body)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    good, cpp, unknown, nothing = answer["verdicts"]
    assert good["status"] == "correct" and answer["rewards"][0] == good["reward"]
    assert cpp["status"] == "invalid_label" and "backend" in cpp["error"] and "'all_reduce:cpp'" in cpp["error"]
    assert unknown["status"] == "invalid_label" and "did you mean all_reduce" in unknown["error"]
    assert nothing["status"] == "invalid_sample" and "No solution was found" in nothing["feedback"]
    assert answer["rewards"][1:] == [0.0, 0.0, 0.0] and answer["extra_logs"]["judged"] == [1.0, 0.0, 0.0, 1.0]
    v1 = service.post("/v1/verify", {**_item(HONEST, 1), "backend": "cpp"})
    assert v1.status_code == 422 and "backend" in v1.json()["error"]
    assert httpx.get(service.url + "/v1/problems?backend=cpp").status_code == 422
    lost = httpx.get(service.url + "/v2/nothing")
    assert lost.status_code == 404 and lost.json()["error"] == "Not Found"
    malformed = service.post("/openrlhf/reward", {"query": ["a", "b"], "labels": ["x"]})
    assert malformed.status_code == 422 and "one length" in malformed.json()["error"]


async def _as_openrlhf(url: str, query: str, prompt: str, label: str) -> tuple[dict | None, int]:
    """A rollout's reward as OpenRLHF 0.11.0 asks for it (OpenRLHF/OpenRLHF at 3c3be623,
    openrlhf/utils/agent.py, SingleTurnAgentExecutor.execute and _fetch_rewards_via_http): one POST
    of ``{"query": [query], "prompts": [prompt], "labels": [label]}``, each try in a new aiohttp
    session with ClientTimeout(total=180) and raise_for_status; any error is logged and followed
    by a 1 s sleep (no Retry-After), 5 tries, then RuntimeError, which the executor catches, leaving
    the rollout's reward None (and the experience step without it). From the JSON: ``rewards`` is
    the reward, ``scores`` (else ``rewards``) the score. Returns (what it read or None, tries)."""
    payload = {"query": [query], "prompts": [prompt], "labels": [label]}
    timeout = aiohttp.ClientTimeout(total=180)
    for attempt in range(1, 6):
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async with session.post(url, json=payload) as response:
                    response.raise_for_status()
                    info = await response.json()
            score = info.get("scores")
            return {"reward": info.get("rewards"), "scores": info.get("rewards") if score is None else score,
                    "extra_logs": info.get("extra_logs") or {}, "verdicts": info.get("verdicts")}, attempt
        except Exception:  # noqa: BLE001 - as OpenRLHF: aiohttp.ClientError and anything else alike
            pass
        await asyncio.sleep(1)
    return None, 5


def test_a_burst_sent_as_openrlhf_sends_it_gets_every_reward(service):
    """4 x serve.max_pending rollouts at once, one request each: every one is held and answered on
    its first try (no 429 for OpenRLHF to lose), while more than max_pending wait at once."""
    service.idle()
    rollouts = [(PROMPT + _reply(_source(HONEST if i % 2 else WRONG, 100 + i)), "all_reduce")
                for i in range(4 * MAX_PENDING)]
    seen, stop = [], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(httpx.get(service.url + "/healthz").json()["pending"])
            time.sleep(0.1)

    async def burst():
        return await asyncio.gather(*(_as_openrlhf(service.url + "/openrlhf/reward", query, PROMPT, label)
                                      for query, label in rollouts))

    watcher = threading.Thread(target=watch)
    watcher.start()
    start = time.monotonic()
    try:
        got = asyncio.run(burst())
    finally:
        stop.set()
        watcher.join()
    assert [tries for _, tries in got] == [1] * len(rollouts), got
    for i, (info, _) in enumerate(got):
        (verdict,) = info["verdicts"]
        assert verdict["status"] == ("correct" if i % 2 else "wrong_output"), verdict
        assert info["reward"] == [verdict["reward"]] and isinstance(info["reward"][0], float)
        assert info["extra_logs"]["judged"] == [1.0]
    assert max(seen) > MAX_PENDING, seen  # held beyond max_pending, not refused
    assert time.monotonic() - start < 150


def test_errors_are_answered_as_http_means_them(service):
    """504 for a late request (and in a batch, in its slot, the others intact), 429 with JSON and
    Retry-After for one whose expected wait is past its deadline, while an OpenRLHF request at the
    same moment is held and gets its verdict; the late sample answers from its verdict afterwards."""
    service.idle()
    honest = _item(HONEST, 200)
    assert service.post("/v1/verify", honest).json()["status"] == "correct"
    late = service.post("/v1/verify", _item(HANGS, 200, deadline_s=1))
    assert late.status_code == 504 and late.json()["status"] == "deadline_exceeded" and late.headers["retry-after"]
    batch = service.post("/v1/verify_batch", {"items": [honest, _item(HANGS, 201)], "deadline_s": 2})
    assert batch.status_code == 200, batch.text
    kept, missed = batch.json()["results"]
    assert kept["status"] == "correct" and kept["cached"]
    assert missed["status"] == "deadline_exceeded" and missed["reward"] is None and "deadline" in missed["error"]
    # two hanging samples hold the one gang: no room for a request that must be answered in 0.5 s
    full = service.post("/v1/verify", _item(HONEST, 201, deadline_s=0.5))
    assert full.status_code == 429, full.text
    refusal = full.json()
    assert refusal["status"] == "busy" and refusal["expected_wait_s"] > 0.5 and refusal["retry_after_s"] >= 1
    assert "serve.max_pending=2" in refusal["error"] and int(full.headers["retry-after"]) >= 1
    held = service.post("/openrlhf/reward", {"query": [PROMPT + _reply(_source(HONEST, 202))], "prompts": [PROMPT],
                                             "labels": ["all_reduce"]}, timeout=180)
    assert held.status_code == 200 and held.json()["verdicts"][0]["status"] == "correct"
    service.idle()
    again = service.post("/v1/verify", _item(HANGS, 200))
    assert again.status_code == 200 and again.json()["status"] == "timeout" and again.json()["cached"]


def _gcs_address(pid: int) -> str:
    """The address of the local Ray that process ``pid`` started: its raylet and agents, children of
    ``pid``, are told it (``--gcs-address=IP:PORT``)."""
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        given = [a for a in cmd if a.startswith(b"--gcs-address=")]
        if parent == pid and given:
            return given[0].split(b"=", 1)[1].decode()
    raise AssertionError(f"no Ray process under process {pid}")


KILL_COMPILERS = """
import sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR")
named = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("serve-compile-")]
assert named, ray.util.list_named_actors(all_namespaces=True)
for a in named:
    ray.kill(ray.get_actor(a["name"], namespace=a["namespace"]))
for a in named:  # gone once its name is free
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            ray.get_actor(a["name"], namespace=a["namespace"])
        except ValueError:
            break
        time.sleep(0.2)
print(len(named))
"""


def _kill_compile_actors(service) -> None:
    done = subprocess.run([sys.executable, "-c", KILL_COMPILERS, _gcs_address(service.proc.pid)], env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr[-2000:]


def test_the_evaluator_s_own_failure_is_503_in_its_slot_and_mended(service):
    """A compile actor that dies under a CUDA sample: 503 with Retry-After (the sample is not to
    blame), a new actor builds it when asked again; in a batch, 503 in its slot only; OpenRLHF's
    route asks again itself and gets the verdict."""
    service.idle()
    honest = _item(HONEST, 300)
    assert service.post("/v1/verify", honest).json()["status"] == "correct"
    _kill_compile_actors(service)
    failed = service.post("/v1/verify", _item(CUDA, 300))
    assert failed.status_code == 503, failed.text
    assert failed.json()["status"] == "evaluator_error" and "compile actor" in failed.json()["error"]
    assert failed.headers["retry-after"] == "1"
    mended = service.post("/v1/verify", _item(CUDA, 300))
    assert mended.status_code == 200 and mended.json()["status"] == "compile_error", mended.text
    _kill_compile_actors(service)
    batch = service.post("/v1/verify_batch", {"items": [honest, _item(CUDA, 301)]}).json()["results"]
    assert batch[0]["status"] == "correct" and batch[0]["cached"], batch  # seen once: evaluator_error here
    assert batch[1]["status"] == "evaluator_error" and batch[1]["reward"] is None, batch
    _kill_compile_actors(service)
    rollout = service.post("/openrlhf/reward", {"query": [PROMPT + _reply(_source(CUDA, 302))], "prompts": [PROMPT],
                                                "labels": ["all_reduce:cuda"]}, timeout=180).json()
    assert rollout["verdicts"][0]["status"] == "compile_error" and rollout["extra_logs"]["judged"] == [1.0]


def test_a_second_service_on_its_port_is_refused(service):
    """Serve's proxy shares a port (SO_REUSEPORT): a second service there would take half of the
    first one's requests. It stops at once instead, saying why, and the first one answers on."""
    port = int(service.url.rsplit(":", 1)[1])
    start = time.monotonic()
    second = subprocess.run(_command(port, service.folder / "second"), cwd=service.folder, env=_env(),
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"serve.port: 127.0.0.1:{port} is in use" in second.stderr and "pkb-ray serve" in second.stderr
    assert time.monotonic() - start < 60  # refused before any Ray started
    assert httpx.get(service.url + "/healthz").json()["ok"]
    print(json.dumps({"refusal": second.stderr.strip().splitlines()[-1]}))
