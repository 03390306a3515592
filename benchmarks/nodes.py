"""Inter-node baselines without a multi-node cluster: fake Ray nodes on this machine, then
``python -m pkb_ray.baselines`` against them.

    python3 -m benchmarks nodes hardware=h200_2x1_socket eval=gpu eval.size=default   # 2 x H200
    .venv/bin/python -m benchmarks nodes --gpus-per-node 1 hardware=cpu_gloo hardware.nodes=2 \\
        'hardware.spread=[2x1]' problems=smoke                                         # CPU, gloo

Two runs of ``pkb_ray.baselines``, one after the other, into the same table; every argument after
the options goes to both. The table goes to the folder ``--out`` (``baselines_dir``; default:
docs/benchmarks/data/nodes_<date-time>/, unless a ``baselines_dir=`` override names another),
beside ``run.json``: how it was made and each run's exit status. First the profile's one-node layouts (``hardware.world_sizes``) on a
local Ray of this whole machine (``hardware.spread=[]``): the comparison point, which fake nodes
of one GPU could not hold. Then the spread layouts (``hardware.world_sizes=[]``) against
``--nodes`` fake Ray nodes (ray.cluster_utils.Cluster) of ``--gpus-per-node`` GPUs each, with
``ray.address`` set to them. On a GPU machine each fake node is started with CUDA_VISIBLE_DEVICES
naming its own GPUs, so Ray hands the gang on node k the physical GPUs of node k (the ranks
renumber them: pkb_ray.runner.rank); without GPUs they are logical. The profile's
``spread_nccl_env`` is what makes NCCL treat the fake nodes as separate machines (no P2P, no
shared memory: sockets).
"""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks import common

REPO = common.REPO


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__, out_help="folder of the baseline table and run.json "
                                      "(default: docs/benchmarks/data/nodes_<date-time>/)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus-per-node", type=int, default=1)
    ap.add_argument("--cpus-per-node", type=int, default=2)
    args, overrides = ap.parse_known_args(argv)
    table = next((o.split("=", 1)[1] for o in overrides if o.startswith("baselines_dir=")), None)
    out = run.out(args.out, folder=True).resolve() if table is None else REPO / table  # the runs' cwd is REPO
    if table is None:
        overrides.append(f"baselines_dir={out}")
    codes = {}
    try:
        return emulate(args, overrides, codes)
    finally:
        print("wrote", run.write(out / "run.json", {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
                                                    "overrides": overrides, "exit": codes}))


def emulate(args, overrides: list[str], codes: dict) -> int:
    """The two runs; each one's exit status into ``codes``."""
    import ray
    from ray.cluster_utils import Cluster

    import torch

    physical = torch.cuda.device_count()
    if physical and physical < args.nodes * args.gpus_per_node:
        print(f"error: {args.nodes} nodes x {args.gpus_per_node} GPUs need {args.nodes * args.gpus_per_node}, "
              f"this machine has {physical}", file=sys.stderr)
        return 2
    baselines = [sys.executable, "-m", "pkb_ray.baselines", *overrides]
    print("inside one node: the one-node layouts on a local Ray of this machine", flush=True)
    code = codes["one_node"] = subprocess.run([*baselines, "hardware.spread=[]"], cwd=REPO).returncode
    if code:
        return code
    os.environ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] = "1"
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    cluster = None
    try:
        for k in range(args.nodes):
            if physical:  # this node's raylet (and so its workers and ranks) sees its own GPUs only
                first = k * args.gpus_per_node
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + i) for i in range(args.gpus_per_node))
            node = {"num_cpus": args.cpus_per_node, "num_gpus": args.gpus_per_node}
            if cluster is None:
                cluster = Cluster(initialize_head=True, head_node_args=node)
            else:
                cluster.add_node(**node)
        cluster.wait_for_nodes()
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
        print(f"fake cluster: {args.nodes} nodes x {args.gpus_per_node} GPU(s) at {cluster.address}", flush=True)
        codes["spread"] = subprocess.run([*baselines, f"ray.address={cluster.address}", "hardware.world_sizes=[]"],
                                         cwd=REPO).returncode
        return codes["spread"]
    finally:
        if cluster is not None:
            ray.shutdown()
            cluster.shutdown()
