"""A trusted process reads another process's GPU tensors through CUDA IPC handles
(:mod:`pkb_ray.runner.cuda_ipc`) while that process is stopped, as a clean rank reads a candidate's.

The exporter is a real second process (``sys.executable -c``); it prints its allocations as JSON
and waits for lines on stdin. Skipped without a CUDA GPU. Run there with
``python3 -m pytest -q tests/test_cuda_ipc_on_gpu.py``.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
import torch

from conftest import REPO
from pkb_ray.runner.cuda_ipc import Importer, IpcReadError, available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]

# The tensors, built the same way in the exporter (on the GPU) and here (on the CPU, the expected bytes).
# Integers and halves only: exact on both.
MAKE = """
def make(dev):
    seg = torch.arange(1 << 16, dtype=torch.int32, device=dev) * 3 - 7
    halves = (torch.arange(5000, dtype=torch.float32, device=dev) + 1) * -0.5  # no zero: its sign is moot
    big = (torch.arange(6 << 20, dtype=torch.int64, device=dev) % 251).to(torch.uint8)
    # a and b: two views into one tensor; small tensors (seg, halves) share one 2 MiB caching-allocator
    # segment; off: at an odd offset into a large allocation of its own
    return {"a": seg[100:1100], "b": seg[40000:41000], "halves": halves, "off": big[123457:123457 + 100003]}
"""

CHILD = MAKE + """
import json, sys, torch
from pkb_ray.runner.cuda_ipc import Exporter
torch.cuda.init()
tensors = make(torch.device("cuda", 0))
exporter = Exporter()
for t in tensors.values():
    exporter.note(t.data_ptr())
allocations = exporter.take_new()
for t in tensors.values():  # all known now: nothing new
    exporter.note(t.data_ptr() + t.nbytes - 1)
torch.cuda.synchronize()
print(json.dumps({"allocations": allocations, "again": exporter.take_new(),
                  "spans": {k: [t.data_ptr(), t.nbytes] for k, t in tensors.items()}}), flush=True)
for line in sys.stdin:  # "bump": change every tensor, to see that a second read sees it
    for t in tensors.values():
        t.add_(1)
    torch.cuda.synchronize()
    print("bumped", flush=True)
"""


def expected(bump: int = 0) -> dict[str, bytes]:
    scope = {"torch": torch}
    exec(MAKE, scope)
    return {k: (t + bump).contiguous().numpy().tobytes() for k, t in scope["make"](torch.device("cpu")).items()}


@contextlib.contextmanager
def exporter(prefix: list[str] = ()):
    """The exporting child, run under ``prefix``, in its own process group (so that SIGSTOP stops
    it even under unshare's fork); yields it and its first report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # expandable segments are VMM memory, which legacy IPC cannot export
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen([*prefix, sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=err, env=env, text=True, start_new_session=True)
        try:
            line = p.stdout.readline()
            if not line:
                err.seek(0)
                pytest.fail(f"the exporter exited with {p.wait()}:\n{err.read()}")
            yield p, json.loads(line)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGCONT)
            p.stdin.close()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def allocations_of(report: dict) -> dict[int, tuple[int, str]]:
    return {int(base): (size, handle) for base, (size, handle) in report["allocations"].items()}


def base_of(allocations: dict[int, tuple[int, str]], address: int) -> int:
    (base,) = [b for b, (size, _) in allocations.items() if b <= address < b + size]
    return base


def read_and_compare(p: subprocess.Popen, report: dict) -> None:
    allocations = allocations_of(report)
    names = list(report["spans"])
    spans = [tuple(report["spans"][k]) for k in names]
    importer = Importer(torch.device("cuda", 0))
    try:
        os.killpg(p.pid, signal.SIGSTOP)  # the owner takes no part in the read, as a stopped candidate
        got = importer.read(allocations, spans)
        assert {k: t.cpu().numpy().tobytes() for k, t in zip(names, got)} == expected()
        os.killpg(p.pid, signal.SIGCONT)
        p.stdin.write("bump\n")
        p.stdin.flush()
        assert p.stdout.readline() == "bumped\n"
        os.killpg(p.pid, signal.SIGSTOP)
        got = importer.read(allocations, spans)  # the same handles, opened once: the bytes now
        assert {k: t.cpu().numpy().tobytes() for k, t in zip(names, got)} == expected(bump=1)
    finally:
        importer.close()
        os.killpg(p.pid, signal.SIGCONT)


def test_the_module_sees_the_driver():
    assert available()


def test_a_stopped_process_tensors_are_read_through_their_allocations_handles():
    with exporter() as (p, report):
        allocations = allocations_of(report)
        assert report["again"] == {}, "noting addresses in known allocations exported them again"
        assert all(len(handle) == 128 for _, handle in allocations.values()), allocations
        bases = {k: base_of(allocations, address) for k, (address, _) in report["spans"].items()}
        assert bases["a"] == bases["b"] == bases["halves"] != bases["off"], bases
        assert len(allocations) == 2, allocations
        read_and_compare(p, report)


def test_spans_outside_the_allocations_or_without_a_handle_are_refused():
    with exporter() as (p, report):
        allocations = allocations_of(report)
        end = max(base + size for base, (size, _) in allocations.items())
        base = min(allocations)  # nothing below it
        size = allocations[base][0]
        importer = Importer(torch.device("cuda", 0))
        try:
            for span in [(end + 4096, 4), (base - 4096, 4), (base + size - 2, 4)]:
                with pytest.raises(IpcReadError):
                    importer.read(allocations, [span])
            with pytest.raises(IpcReadError, match="no IPC handle"):
                importer.read({base: (size, "")}, [(base, 4)])
            assert importer.read(allocations, [(base, 0)])[0].numel() == 0
            (ok,) = importer.read(allocations, [(base + size - 4, 4)])  # the last bytes are in
            assert ok.numel() == 4
        finally:
            importer.close()


UNSHARE = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child"]


def test_an_exporter_in_its_own_user_and_pid_namespace_is_read_too():
    # ranks run sandboxed in their own namespaces, the trusted side outside them
    if shutil.which("unshare") is None:
        pytest.skip("no unshare (util-linux)")
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare fails here: {probe.stderr.strip()}")
    with exporter(UNSHARE) as (p, report):
        read_and_compare(p, report)


def test_a_stopped_process_tensors_are_written_through_their_handles():
    # the trusted side fills a stopped candidate's staged inputs this way (runner.clean.fill)
    with exporter() as (p, report):
        allocations = allocations_of(report)
        address, nbytes = report["spans"]["a"]  # 1000 int32 in a segment shared with other tensors
        importer = Importer(torch.device("cuda", 0))
        try:
            os.killpg(p.pid, signal.SIGSTOP)
            new = torch.arange(1000, dtype=torch.int32, device="cuda:0") * 5 + 11
            importer.write(allocations, [(address, nbytes)], [new])
            with pytest.raises(IpcReadError):  # a source of another size than the span
                importer.write(allocations, [(address, nbytes)], [new[:10]])
            os.killpg(p.pid, signal.SIGCONT)
            p.stdin.write("bump\n")  # the owner adds 1 to its own tensors: it sees what was written
            p.stdin.flush()
            assert p.stdout.readline() == "bumped\n"
            os.killpg(p.pid, signal.SIGSTOP)
            got, neighbour = importer.read(allocations, [(address, nbytes), tuple(report["spans"]["b"])])
            assert torch.equal(got.view(torch.int32), new + 1)
            assert neighbour.cpu().numpy().tobytes() == expected(bump=1)["b"]  # nothing else written
        finally:
            importer.close()
            os.killpg(p.pid, signal.SIGCONT)
