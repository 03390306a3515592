import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from pkb_ray.evaluate.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig

REPO = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).resolve().parent / "samples"


@pytest.fixture(scope="session")
def problems():
    return load_problems()


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")  # reference outputs shared by the session's harnesses


def cpu_harness(problems, world_size: int, eval_overrides: dict, work_dir: Path, cache_dir: Path,
                private: list[Path] = ()) -> Harness:
    """A harness of ``world_size`` gloo ranks with the tests' short protocol, ``eval_overrides`` on top."""
    settings = dict(trials=2, timing_sets=2, warmup=2, rounds=10, max_round_calls=1, timeout_s=20, prewarm=0)
    return Harness(["cpu"] * world_size, EvalConfig(**{**settings, **eval_overrides}),
                   HardwareConfig(world_sizes=[world_size], gpus_per_node=world_size), problems,
                   work_dir=work_dir, cache_dir=cache_dir, private=private)


@pytest.fixture
def make_harness(problems, cache_dir, tmp_path):
    made = []

    def make(world_size: int = 2, cache: Path | None = None, private: list[Path] = (), **eval_overrides) -> Harness:
        h = cpu_harness(problems, world_size, eval_overrides, tmp_path / f"work{len(made)}", cache or cache_dir, private)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


@pytest.fixture(scope="session")
def shared_harness(problems, cache_dir, tmp_path_factory):
    """``shared_harness(world_size, **eval_overrides)``: one harness per setting for the whole session,
    as a gang keeps one for every sample it is given. Tests whose samples are hostile use it on
    purpose: a harness must judge the next sample right whatever the last one did. A test that
    needs its own (private paths, its own cache, counting rank sets, closing it) takes
    ``make_harness``. The three most recently used stay open (each keeps a clean rank set)."""
    made: dict[tuple, Harness] = {}

    def get(world_size: int = 2, **eval_overrides) -> Harness:
        key = (world_size, tuple(sorted((k, repr(v)) for k, v in eval_overrides.items())))
        if key not in made:
            made[key] = cpu_harness(problems, world_size, eval_overrides, tmp_path_factory.mktemp("shared"), cache_dir)
            while len(made) > 3:
                made.pop(next(iter(made))).close()
        made[key] = made.pop(key)  # the newest last
        return made[key]

    yield get
    for h in made.values():
        h.close()


class SharedRay:
    """The session's Ray cluster (tests/shared_ray.py): two nodes, 6 + 2 logical GPUs, API keys kept
    from its processes. ``joined()`` connects this process; ``overrides(gpus)`` are a sweep's keys for
    joining it with the GPUs its own local Ray would have had, ``env(base)`` its environment. The
    cluster asks for no token (``RAY_AUTH_MODE=disabled``): a driver that joins reads the mode when
    Ray is imported, so this process could not join one that asks.

    One cluster for the whole run, also when pytest-xdist runs the tests in several processes: the
    first to need it starts it (under a lock in the run's temporary folder, which its workers share)
    and writes its address there; the others read it. It lives until the pytest process that runs
    the session ends (``--until-pid``), and :func:`stop_shared_ray` stops it at the session's end."""

    def __init__(self, root: Path):
        import fcntl
        import json

        info = root / "shared_ray.json"
        with open(root / "shared_ray.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not info.exists():
                info.write_text(json.dumps(self._start(root / "shared_ray")))
        self.info = json.loads(info.read_text())
        self.address = self.info["address"]

    def _start(self, work: Path) -> dict:
        import json
        import subprocess
        import sys

        work.mkdir()
        out = work / "holder.out"
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        with open(out, "w") as stdout, open(work / "holder.log", "w") as stderr:
            proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("shared_ray.py")), str(work),
                                     "--until-pid", str(session_pid()), "--head-cpus", str(2 * workers)],
                                    cwd=REPO, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                    env=self.env(dict(os.environ, RAY_DISABLE_USAGE_STATS="1")))
        _HOLDERS[proc.pid] = proc
        deadline = time.monotonic() + 300
        while not out.read_text().endswith("\n"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tests/shared_ray.py ended ({proc.poll()}) before its cluster was up: "
                                   f"{(work / 'holder.log').read_text()[-3000:]}")
            time.sleep(0.2)
        return {**json.loads(out.read_text()), "holder_pid": proc.pid}

    def overrides(self, gpus: int = 2) -> list[str]:
        return [f"ray.address={self.address}", f"ray.max_gpus={gpus}"]

    @staticmethod
    def env(base: dict | None = None) -> dict:
        return dict(os.environ if base is None else base, RAY_AUTH_MODE="disabled")

    @contextlib.contextmanager
    def joined(self):
        import ray

        ray.init(address=self.address, configure_logging=False, log_to_driver=False)
        try:
            yield self
        finally:
            ray.shutdown()


_HOLDERS: dict = {}  # pid -> Popen of the cluster holders this process started (reaped when stopped)


def session_pid() -> int:
    """The pytest process that runs the session: this one, or an xdist worker's controller."""
    return os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()


def shared_root(tmp_path_factory) -> Path:
    """The run's temporary folder, which every xdist worker's own folder is inside."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def shared_ray(tmp_path_factory):
    return SharedRay(shared_root(tmp_path_factory))


def stop_shared_ray(root: Path) -> None:
    """Stop the run's cluster, if one was started, and wait until its holder has shut it down."""
    import json
    import signal

    info = root / "shared_ray.json"
    if not info.exists():
        return
    pid = json.loads(info.read_text())["holder_pid"]
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if pid in _HOLDERS:
        _HOLDERS.pop(pid).wait(timeout=90)
        return
    deadline = time.monotonic() + 90
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)


def pytest_collection_modifyitems(config, items):
    """The longest files first (tests/file_seconds.py says why), each file's tests in their order."""
    from file_seconds import UNKNOWN_S, load

    seconds = load()
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], UNKNOWN_S))


def pytest_sessionfinish(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the process that runs the session, with or without xdist
        stop_shared_ray(session.config._tmp_path_factory.getbasetemp())


def as_from_a_terminal() -> None:
    """A Popen's preexec_fn for a command a test will Ctrl-C: SIGINT as a terminal leaves it. A suite
    started in the background of a script (`./scripts/test.sh &`) inherits it ignored, and Python
    then installs no KeyboardInterrupt for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def rank_processes(under: Path, clean: bool = False, ranks_only: bool = False) -> list[int]:
    """Live processes of rank sets whose command line mentions a path under ``under`` (their job
    folder): the ranks, and (unless ``ranks_only``) their launcher and sandbox; the harness's clean
    rank set (which lives until the harness closes) only if ``clean``. Ranks are forked from the
    launcher (same command line) and renamed (:data:`pkb_ray.runner.launch.RANK_NAME`). A set
    forked by a zygote carries the zygote's command line (which names its work folder); the zygote
    itself, which never runs candidate code and lives as long as its harness, is not counted. A
    rank is also found by its output, a log in its job folder."""
    from pkb_ray.runner.launch import RANK_NAME, process_name
    from pkb_ray.runner.zygote import ZYGOTE_NAME

    modules = ("pkb_ray.runner.rank", "pkb_ray.runner.launch", "pkb_ray.runner.zygote")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        started = any(a == "-m" and b in modules for a, b in zip(argv, argv[1:]))
        if started and "pkb_ray.runner.zygote" in argv and process_name(int(entry.name)) in (ZYGOTE_NAME, "bwrap"):
            continue
        if ranks_only and started:
            started = process_name(int(entry.name)) == RANK_NAME
        line = " ".join(argv)
        with contextlib.suppress(OSError):  # a rank's output: its job folder's rank<R>.log (forked sets too)
            line += " " + os.readlink(entry / "fd" / "1")
        if started and str(under) in line and (clean or "/clean-" not in line) and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def gang_actors() -> list[str]:
    """The gang actors this process's Ray job has named. Only its own namespace: another pytest
    process (pytest-xdist) may run gangs of its own on the shared cluster at the same time."""
    import ray

    return [a["name"] for a in ray.util.list_named_actors() if a["name"].startswith("gang-")]


def rank_processes_left(under: Path, within_s: float = 10.0, clean: bool = False) -> list[int]:
    """Rank processes under ``under`` still alive after up to ``within_s`` (rank sets are SIGKILLed
    at once but reaped in the background)."""
    deadline = time.monotonic() + within_s
    while (left := rank_processes(under, clean)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


class StandIn:
    """A loopback HTTP server standing in for Ray's dashboard and job API; counts connections."""

    def __init__(self):
        import http.server
        import threading

        self.connections = 0
        outer = self

        class Server(http.server.ThreadingHTTPServer):
            def verify_request(self, request, client_address):
                outer.connections += 1
                return True

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b'{"jobs": []}')

            def log_message(self, *args):
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.server.shutdown()
