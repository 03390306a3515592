"""``pkb-ray submit`` against a real Ray head (``ray start --head --block``, its job server on
loopback, token auth on) with results in moto's S3 server (tests/test_object_store.py's): the
working dir shipped, the S3 secret reaching the driver only (``--key-file``), the logs streamed,
the report in the bucket, exit codes from the job's status, Ctrl-C leaving the job running.

Cheap on purpose (docs/benchmarks/submit.md): a job that evaluates a sample costs ~80 s on 2 cores,
the same as a local sweep (tests/test_object_store.py evaluates into a bucket). So here the jobs
evaluate nothing: one resumes a bucket that has its one result (and writes the report beside it),
one joins the cluster and is refused there (a layout of 4 GPUs on a head of 2), one has no python.
"""

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, as_from_a_terminal
from pkb_ray.generate.samples import read_samples
from pkb_ray.results.parquet import read_results, write_results
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, Sample, TrialRecord
from test_object_store import CREDENTIALS, _free_port, _objects, s3, s3_server  # noqa: F401 - fixtures

PKB_RAY = str(Path(sys.executable).parent / "pkb-ray")
BIN = str(Path(sys.executable).parent)


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (by parent id, from /proc): Ray's, its workers, the jobs' drivers."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def ray_head():
    """A Ray head of its own (2 CPUs, 2 logical GPUs: a gang of the cpu_gloo layout fits), started from
    this venv (its bin/ first on PATH, as the README says), token auth with a token of its own;
    yields (job server address, token file). Everything below it is killed by id at the end."""
    temp = Path(tempfile.mkdtemp(prefix="pkbj-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    token = temp / "token"
    token.write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "RAY_AUTH", "RAY_ADDRESS")) and k != "RAY_RUNTIME_ENV_IGNORE_GITIGNORE"}
    env.update(PATH=f"{BIN}:{env.get('PATH', '')}", RAY_DISABLE_USAGE_STATS="1", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN_PATH=str(token))
    port = _free_port()
    ports = ["--dashboard-port", str(port), "--ray-client-server-port", str(_free_port()),
             "--dashboard-agent-listen-port", str(_free_port())]
    log = (temp / "head.log").open("w")
    head = subprocess.Popen([f"{BIN}/ray", "start", "--head", "--block", "--port", "0", "--num-cpus", "2",
                             "--num-gpus", "2", "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
                             *ports, "--temp-dir", str(temp / "ray"), "--disable-usage-stats"],
                            cwd=temp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:  # the job server answers once its module is up
            request = urllib.request.Request(f"{address}/api/jobs/",
                                             headers={"Authorization": f"Bearer {token.read_text()}"})
            try:
                urllib.request.urlopen(request, timeout=2)
                break
            except (OSError, urllib.error.HTTPError):
                if head.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the Ray head did not start: {(temp / 'head.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield address, token
    finally:
        pids = _descendants(head.pid)  # the head, its daemons, workers and the jobs' drivers
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        head.wait(timeout=30)
        log.close()
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [p for p in pids if _alive(p)]
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"processes of the Ray head left: {left}"


def _job_id(said: str) -> str:
    return re.search(r"submitted (raysubmit_\w+)", said).group(1)


def test_sweeps_sent_as_ray_jobs_stream_their_logs_and_exit_as_the_jobs_end(s3, s3_server, ray_head, tmp_path):
    bucket, fs = s3
    address, token = ray_head
    secret = f"job-secret-{secrets.token_hex(4)}"  # moto takes any; it must reach the driver, and no further
    (tmp_path / "aws_secret").write_text(secret)
    # here: no RAY_AUTH_MODE; the token file ray start used, sent to the loopback job server
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(CREDENTIALS, AWS_ENDPOINT_URL_S3=s3_server, RAY_AUTH_TOKEN_PATH=str(token), RAY_DISABLE_USAGE_STATS="1")
    target = f"s3://{bucket}/job"
    # the one evaluation the job would make (the shipped broadcast #0 at W=2, small, float32), done
    row = next(r for r in read_samples(REPO / "samples" / "replay") if r["problem_id"] == "broadcast")
    write_results([Result.for_sample(Sample(**row), Status.CORRECT, world_size=2, size="small", dtype="float32",
                                     hardware="cpu_gloo", trials=[TrialRecord(seed=0, rank=1, ok=True)],
                                     ref_median_us=[1.0, 2.0], ref_time_us=2.0, cand_time_us=2.0, speedup=1.0)],
                  target)
    sweep = ["problems.ids=[broadcast]", "model.limit_per_problem=1", "hardware=cpu_gloo", "eval.size=small",
             "wandb=disabled", f"cache_dir={tmp_path / 'cache'}"]
    keys = ["--pass-env", "AWS_ACCESS_KEY_ID", "--pass-env", "AWS_ENDPOINT_URL_S3", "--pass-env", "AWS_DEFAULT_REGION",
            "--key-file", f"AWS_SECRET_ACCESS_KEY={tmp_path / 'aws_secret'}"]

    def submit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([PKB_RAY, "submit", "--address", address, *args], env=env, capture_output=True,
                              text=True, timeout=timeout)

    # three jobs at once, none waited for: sent, they run on their own
    jobs = {"resume": submit("--no-wait", *keys, *sweep, f"results_dir={target}"),
            "no room": submit("--no-wait", *keys, *sweep, "hardware.gpus_per_node=4", "hardware.world_sizes=[4]",
                              f"results_dir={target}-w4"),
            "no python": submit("--no-wait", "--python", "/nonexistent/python", "wandb=disabled",
                                f"results_dir={target}-never")}
    for name, sent in jobs.items():
        assert sent.returncode == 0 and "follow: pkb-ray submit" in sent.stderr, (name, sent.stderr)
        assert secret not in sent.stderr + sent.stdout
    ids = {name: _job_id(sent.stderr) for name, sent in jobs.items()}
    # said before sending, from the cluster's own node list, with what a CPU-only head needs
    assert ("warning: hardware.world_sizes: 1x4 needs 1 node(s) with 4 GPUs each; the Ray cluster has [2] GPUs per "
            "node (CPU-only nodes: start their Ray with `ray start ... --num-gpus 4` or more") in jobs["no room"].stderr
    assert "warning:" not in jobs["resume"].stderr + jobs["no python"].stderr

    # Ctrl-C while following: this stops, the job goes on
    follower = subprocess.Popen([PKB_RAY, "submit", "--address", address, "--follow", ids["resume"]], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=as_from_a_terminal)
    for line in follower.stdout:
        if "Running entrypoint" in line:
            break
    time.sleep(1)
    follower.send_signal(signal.SIGINT)
    said = follower.stdout.read()
    assert follower.wait(timeout=60) == 130, said
    assert "stopped following; the job goes on" in said and "Traceback" not in said, said

    failed = submit("--follow", ids["no python"], timeout=120)
    assert failed.returncode == 1, failed.stderr
    assert "/nonexistent/python: not found" in failed.stdout  # the job's own output, streamed
    assert f"job {ids['no python']}: FAILED: Job entrypoint command failed with exit code 127" in failed.stderr
    assert "hint: the head node's python is missing" in failed.stderr

    # joined the cluster (the key read from its file on the head: the bucket was written), refused there
    refused = submit("--follow", ids["no room"])
    assert refused.returncode == 1, refused.stdout[-3000:] + refused.stderr[-2000:]
    assert ("error: hardware.world_sizes: 1x4 needs 1 node(s) with 4 GPUs each; the Ray cluster has [2] GPUs per "
            "node") in refused.stdout
    assert "exit code 2" in refused.stderr

    done = submit("--follow", ids["resume"])  # its logs from the start, until it ends
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.count("Running entrypoint") == 1
    assert "nothing left to evaluate" in done.stdout and f"report: {target}/_report/report.html" in done.stdout
    assert f"job {ids['resume']}: SUCCEEDED" in done.stderr

    objects = _objects(fs, f"{bucket}/job")
    assert {"_report/report.html", "_report/report.md"} <= set(objects)
    assert len(read_results(target)) == 1
    # the secret stayed out of what the job API shows: a shell word read on the head, not a value
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address, headers={"Authorization": f"Bearer {token.read_text()}"})
    for job_id in ids.values():
        info = client.get_job_info(job_id)
        assert secret not in repr(info) and "AWS_SECRET_ACCESS_KEY" not in (info.runtime_env.get("env_vars") or {})
