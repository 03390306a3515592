"""The test session's one Ray cluster: a head started by ``pkb_ray.pipeline.cluster.start_ray`` and a second
node that joins it (``ray start --address``), both on this machine.

Starting Ray costs 5-10 s of the 2 CPUs a test run has, so the tests that need a cluster share this
one (conftest's ``shared_ray`` fixture starts it once, on first use): in-process tests join it with
``ray.init(address=...)``, sweeps get ``ray.address=<it> ray.max_gpus=<what their local Ray would
have had>``. Tests run one at a time, so each job has the cluster to itself; a job's actors and
placement groups go when its driver disconnects.

The head is started the way a sweep starts its local Ray, with API keys in the environment
(``CANARIES``): tests/test_keys_on_cpu.py checks that no task or actor on either node sees them.
The second node makes the spread layouts of tests/test_nodes_on_cpu.py possible. Before it joins,
the helper ends a job and starts the next as a Hydra multirun's jobs do (``cluster.end_job(keep=True)``,
then ``join_or_start``): the next job must get the same local Ray. The cluster asks for no token
(``RAY_AUTH_MODE=disabled``, set by conftest): a driver reads the mode when Ray is imported.

Run as ``python tests/shared_ray.py WORK_DIR --until-pid PID [--head-cpus N]``: prints one JSON line
(``address``, ``nodes``, ``driver_kept_keys``, ``next_job_reused_it``) once both nodes are up, then
holds the cluster until it gets SIGTERM or process PID (the pytest run) is gone. The head has 2
CPUs for each test process that may run a pipeline at once (``--head-cpus``): more than the
machine's cores would have Ray Data start more workers than the cores run.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HEAD_GPUS = 6
NODE_CPUS, NODE_GPUS = 0, 2  # no CPUs: compile actors and Ray Data's tasks stay on the head
CANARIES = {"OPENAI_API_KEY": "sk-test-canary-openai", "WANDB_API_KEY": "wandb-canary-0123",
            "HF_TOKEN": "hf_canary_token", "DB_PASSWORD": "canary-password",
            "PKB_LLM_ACCESS": "canary-named-by-api-key-env"}  # no deny word: caught as model.api_key_env
PASSING = {"RAY_PKB_TEST_TOKEN": "ray-setting-passes",  # a deny word, but Ray's own prefix
           "PKB_TEST_PLAIN": "plain-passes"}


def main(work: Path, until_pid: int, head_cpus: int) -> None:
    import ray
    from ray._common.utils import get_ray_address_file

    from pkb_ray.pipeline import cluster
    from pkb_ray.spec.config import SweepConfig

    os.environ.update(CANARIES)
    os.environ.update(PASSING)
    cfg = SweepConfig.model_validate({
        "model": {"api_key_env": "PKB_LLM_ACCESS"}, "eval": {"isolation": "none"},
        "ray": {"num_cpus": head_cpus, "num_gpus": HEAD_GPUS, "include_dashboard": False},
        "hardware": {"gpus_per_node": HEAD_GPUS}, "cache_dir": str(work / "cache")})
    cluster.start_ray(cfg)
    kept = all(os.environ.get(k) == v for k, v in CANARIES.items())
    address = ray.get_runtime_context().gcs_address
    cluster.end_job(keep=True)  # as a job of a Hydra multirun ends; the next one, of the same settings:
    cluster.join_or_start(cfg)
    reused = ray.is_initialized() and ray.get_runtime_context().gcs_address == address
    address_file = Path(get_ray_address_file(None))  # `ray start` records its cluster there for ray.init()
    recorded = address_file.read_text() if address_file.exists() else None
    with cluster.without_secrets([cfg.model.api_key_env]):  # as the head's processes were started
        node = subprocess.Popen([str(Path(sys.executable).parent / "ray"), "start", "--address", address,
                                 "--num-cpus", str(NODE_CPUS), "--num-gpus", str(NODE_GPUS), "--block",
                                 # one log monitor a host: the head's reads this node's logs too (they
                                 # share the session's folder); a second one cost ~15 s of CPU a run
                                 "--include-log-monitor=False", "--disable-usage-stats"], stdout=subprocess.DEVNULL,
                                stderr=(work / "node.log").open("w"), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            if node.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the second node did not join: {(work / 'node.log').read_text()[-2000:]}")
            time.sleep(0.2)
        print(json.dumps({"address": address, "nodes": 2, "driver_kept_keys": kept,
                          "next_job_reused_it": reused}), flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the session's end: the clean-up below
        while _alive(until_pid):  # or the test run died
            time.sleep(0.5)
    finally:
        os.killpg(node.pid, signal.SIGTERM)  # `ray start --block` stops its node's processes
        try:
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
        ray.shutdown()
        _restore(address_file, address, recorded)


def _restore(address_file: Path, address: str, recorded: str | None) -> None:
    """Put back what the address file said before the second node joined: left pointing at this
    cluster once it is gone, a plain ``ray.init()`` on this machine would try to join a dead one."""
    if address_file.exists() and address_file.read_text().strip() == address:
        if recorded is None:
            address_file.unlink()
        else:
            address_file.write_text(recorded)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--until-pid", type=int, required=True)
    parser.add_argument("--head-cpus", type=int, default=2)
    args = parser.parse_args()
    main(args.work, args.until_pid, args.head_cpus)
