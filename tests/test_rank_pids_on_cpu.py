"""A clean rank never shares its process id (in its own PID namespace) with the candidate's rank
it reads through CUDA IPC: legacy IPC refuses a handle whose exporter has the opener's own pid
(CUDA_ERROR_INVALID_CONTEXT), which made every honest output "unreadable" on a GPU when a
candidate's set was started without the zygote (pkb_ray.runner.launch.CLEAN_PID_FLOOR)."""

import pytest

from pkb_ray.runner.launch import CLEAN_PID_FLOOR


@pytest.mark.parametrize("zygote", [True, False])
def test_clean_ranks_pids_are_above_every_candidate_ranks(make_harness, zygote):
    h = make_harness(2, zygote=zygote, prewarm=0)
    candidate = h.pool.take()
    theirs = {r: rep.pid for r, rep in candidate.wait_ready(60).reports.items()}
    ours = {r: rep.pid for r, rep in h.clean.get().wait_ready(60).reports.items()}
    assert sorted(theirs) == sorted(ours) == [0, 1]
    assert min(ours.values()) >= CLEAN_PID_FLOOR > max(theirs.values())
