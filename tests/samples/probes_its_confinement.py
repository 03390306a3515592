# Looks for what a sample forked from a zygote (pkb_ray.runner.zygote) must not find: processes
# other than its own set's in /proc (the zygote, the evaluator, other samples), a capability, a
# way to make a user namespace, another sample's job folder beside its own, a file left in /tmp or
# /dev/shm by an earlier sample; then leaves such files for the next one to find. It raises what it
# found, so that it lands in the result row; finding nothing, it is a correct all-reduce.
import ctypes
import glob
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

FOUND = {}
OURS = ("pkb_ray.rank", "pkb_ray.launch")
for entry in glob.glob("/proc/[0-9]*/comm"):
    try:
        name = Path(entry).read_text().strip()
    except OSError:
        continue
    if name not in OURS:
        FOUND[f"process {entry.split('/')[2]}"] = name
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
for field in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
    if int(status[field].strip(), 16):
        FOUND[field] = status[field].strip()
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER
    FOUND["unshare"] = "a new user namespace"
job_dir = Path(__file__).resolve().parent
beside = sorted(p.name for p in job_dir.parent.iterdir() if p != job_dir)
if beside:
    FOUND["beside the job folder"] = beside
try:
    (job_dir.parent / "planted").write_text("x")
    FOUND["work folder"] = "writable"
except OSError:
    pass
mine = f"pkb-leftover-{job_dir.name}"  # this sample's ranks share their scratch
left = [p for p in glob.glob("/tmp/pkb-leftover-*") + glob.glob("/dev/shm/pkb-leftover-*") if not p.endswith(mine)]
if left:
    FOUND["left by an earlier sample"] = left
for folder in ("/tmp", "/dev/shm"):
    Path(folder, mine).write_text("x")
if FOUND:
    raise RuntimeError(f"found: {json.dumps(FOUND)}")


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
