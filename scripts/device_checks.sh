#!/usr/bin/env bash
# The GPU-side checks on the device machine (2 x H200), results under $OUT:
#   run(command="STEPS='kernels problems' bash scripts/device_checks.sh", carry=[".devdeps"], kind="nvidia-h200-x2")
# A device call is limited to 10 minutes: run the steps in two or three calls (kernels + problems,
# bench, baselines). Each step has its own time limit so one slow step cannot starve the next, and
# a failing step does not stop the others. STEPS defaults to all of them.
# Baselines use the short protocol (2 trials, 2 timing sets of 50 rounds: ~10 s a problem on
# 2 x H200, so 61 problems take two calls): IDS=a,b,c limits them to some problems, and rows
# are saved one by one, so a call cut short keeps what it measured. Work folders stay out of
# $OUT (too many files there and the device tool returns none of them).
#   kernels   tests/test_kernels_on_gpu.py   every expert kernel correct at each of its paths
#   problems  tests/test_problems_on_gpu.py  every problem's reference with NCCL against its oracle
#   bench     benchmarks kernels           expert kernels vs NCCL, 4 KiB..256 MiB  -> $OUT/kernels.json
#   baselines python -m pkb_ray.baselines    every reference at its default size     -> $OUT/baselines/h200_2.json
#   latency   benchmarks link_latency      one-way GPU-to-GPU step (ping-pong)      -> $OUT/latency.json
#   graph     tests/test_graph_on_gpu.py     graph timing mode: captures, fallbacks, the expert kernel
#   sandbox   tests/test_sandbox_on_gpu.py   the allowlisted sandbox with its own network on GPU: NCCL, CUDA
#             builds, symmetric memory and the expert kernels (W=1 with one GPU); then the README's sweep
#             at W=1 (a copy of all_reduce allowed there) with a snooping sample and a reference copy,
#             and the sandbox's start-up                                       -> $OUT/sandbox_sweep.json
#   graph_bench benchmarks kernels --timing-mode both --copies: kernels and reference copies,
#             eager and graph, 4 KiB..256 MiB (KERNELS=problem/file.py,... limits it) -> $OUT/kernels_graph.json
#   readme    the README's GPU guide at W=1: hardware=h200_2 alone picks eval=gpu, eval=cpu beside it is
#             refused, two runs of samples/replay/all_reduce into file:// URIs, pkb-ray compare A B
#                                                                              -> $OUT/readme_sweep.json
# On a 4- or 8-GPU machine (issue 10), with W=4 or W=8 (kind nvidia-h200-x4 / -x8):
#   scale_problems   every reference at W against its oracle, float32 and bfloat16
#   scale_bench      expert kernels vs NCCL at W, bfloat16, 4 KiB..256 MiB      -> $OUT/kernels_w$W.json
#   scale_baselines  every reference at its default size at W                 -> $OUT/baselines/h200_8.json
#   scale_throughput the synthetic set through the pool with gangs of 2, 4 and W -> $OUT/throughput_w*.json
#   scale_hostile    hostile samples on a W gang: statuses and recovery times   -> $OUT/gangs_w$W/
#   trust     issue 51 at W=1 (one GPU is enough): the graph honest copy alone, then
#             tests/test_trust_on_gpu.py and tests/test_interference_on_gpu.py (logs in $OUT/*.log), then
#             reference copies' brackets, eager and graph, with the clean rank's toucher
#                                                                              -> $OUT/bracket_touch.json
#   ladder    benchmarks ladder at W=1, default size, eager then graph: candidates doing the work
#             8, 4, 2, 1 times and references doing it 2 and 4 times (LADDER_SET="--set k=v ...")
#                                                                              -> $OUT/ladder_{eager,graph}.json
#   nodes     benchmarks nodes             the collectives inside one node and across two fake nodes
#                                            (one GPU each, NCCL over sockets)        -> $OUT/baselines_nodes/
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/site
if [ -f .devdeps/site.tar.xz ]; then tar xJf .devdeps/site.tar.xz -C /tmp/site; fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_DISABLE_USAGE_STATS=1
STEPS=${STEPS:-"kernels problems bench baselines nodes"}
W=${W:-8}
SHORT="eval=gpu eval.size=default eval.trials=2 eval.timing_sets=2 eval.rounds=50 wandb=disabled cache_dir=/tmp/pkb_cache"
ONLY=()
if [ -n "${IDS:-}" ]; then ONLY=("problems.ids=[$IDS]"); fi
nvidia-smi -L | tee "$OUT/gpus.txt"
for step in $STEPS; do
  echo "=== $step $(date +%T)"
  case $step in
    kernels)   timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_on_gpu.py 2>&1 | tail -40 ;;
    problems)  timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_problems_on_gpu.py 2>&1 | tail -40 ;;
    bench)     timeout 420 python3 -m benchmarks kernels --device cuda --timeout 30 --out "$OUT/kernels.json" 2>&1 | grep -v Warning ;;
    latency)   timeout 120 python3 -m benchmarks link_latency --out "$OUT/latency.json" 2>&1 | tail -30 ;;
    sandbox)   timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_sandbox_on_gpu.py 2>&1 | tail -30
               mkdir -p /tmp/w1 && sed 's/world_sizes=dict(min=2)/world_sizes=dict(min=1)/' problems/all_reduce.py > /tmp/w1/all_reduce.py
               python3 -c "import json; from pkb_ray.problem import load_problems; src = [open('tests/samples/snoops_on_host.py').read(), load_problems('/tmp/w1')['all_reduce'].source()]; open('/tmp/w1.jsonl', 'w').write(''.join(json.dumps(dict(problem_id='all_reduce', model='snoop', sample_index=i, backend='torch', source=s, metadata={})) + chr(10) for i, s in enumerate(src)))"
               timeout 240 python3 -m pkb_ray.sweep problems_dir=/tmp/w1 hardware=h200_2 'hardware.world_sizes=[1]' \
                 hardware.gpus_per_node=1 eval=gpu model.samples=/tmp/w1.jsonl wandb=disabled ray.include_dashboard=false \
                 hydra.run.dir=/tmp/w1_run cache_dir=/tmp/pkb_cache 2>&1 | tail -12
               python3 -c "import json; from pkb_ray.results.parquet import read_results; df = read_results('/tmp/w1_run/results'); print(json.dumps(df[['sample_index', 'status', 'speedup', 'isolation', 'message']].to_dict('records'), default=str))" | tee "$OUT/sandbox_sweep.json" ;;
    trust)     pytest_log() {  # SECONDS NAME ARGS...: the log in $OUT/NAME.log, its outcome lines here
                 timeout "$1" python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -rf "${@:3}" > "$OUT/$2.log" 2>&1
                 grep -E "^(FAILED|E )|passed|failed" "$OUT/$2.log" | cut -c1-600 | tail -16
               }
               pytest_log 70 honest_graph tests/test_trust_on_gpu.py -k "graph and honest"
               pytest_log 150 trust_graph tests/test_trust_on_gpu.py -k graph
               pytest_log 120 trust_eager tests/test_trust_on_gpu.py -k eager
               pytest_log 150 interference tests/test_interference_on_gpu.py
               timeout 90 python3 -m benchmarks bracket --max-calls 500 --modes eager,graph --reps 3 --touch \
                 --out "$OUT/bracket_touch.json" 2>&1 | tail -8 ;;
    ladder)    for mode in eager graph; do  # issue 63: speedups whose truth is known, 1/8 .. 4, W=1
                 timeout "${LADDER_S:-200}" python3 -m benchmarks ladder --sizes default --modes $mode --ns 8,4,2,1 \
                   --ms 2,4 ${LADDER_SET:-} --out "$OUT/ladder_$mode.json" 2>&1 | grep '^{' | cut -c1-260
               done ;;
    graph)     timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_graph_on_gpu.py 2>&1 | tail -40 ;;
    graph_bench) timeout 540 python3 -m benchmarks kernels --device cuda --timing-mode both --copies --timeout 40 \
                 ${KERNELS:+--only "$KERNELS"} --out "$OUT/kernels_graph.json" 2>&1 | grep -v Warning ;;
    baselines) timeout 540 python3 -m pkb_ray.baselines hardware=h200_2 ray.include_dashboard=false $SHORT "${ONLY[@]}" \
                 "baselines_dir=$OUT/baselines" hydra.run.dir=/tmp/baselines_run 2>&1 | tail -70 ;;
    nodes)     timeout 540 python3 -m benchmarks nodes --nodes 2 --gpus-per-node 1 hardware=h200_2x1_socket \
                 $SHORT problems=collectives "baselines_dir=$OUT/baselines_nodes" hydra.run.dir=/tmp/nodes_run 2>&1 | tail -40 ;;
    scale_problems) for dt in float32 bfloat16; do
                 timeout 280 python3 scripts/check_problems.py --device cuda --world-sizes "$W" --dtype $dt --timeout 30
               done ;;
    scale_bench) timeout 540 python3 -m benchmarks kernels --device cuda --world-size "$W" --dtype bfloat16 \
                 --sizes 4K,64K,256K,1M,16M,64M,256M --timeout 40 --out "$OUT/kernels_w$W.json" 2>&1 | grep -v Warning ;;
    scale_baselines) timeout 540 python3 -m pkb_ray.baselines hardware=h200_8 "hardware.world_sizes=[$W]" ray.include_dashboard=false $SHORT \
                 "${ONLY[@]}" "baselines_dir=$OUT/baselines" hydra.run.dir=/tmp/baselines_run 2>&1 | tail -70 ;;
    scale_throughput) for w in 2 4 "$W"; do
                 timeout 170 python3 -m benchmarks throughput --device cuda --world-size $w --samples 200 --naive 0 \
                   --out "$OUT/throughput_w$w.json" 2>&1 | tail -8
               done ;;
    scale_hostile) timeout 400 python3 -m benchmarks gangs --device cuda --world-size "$W" --phases statuses,recovery \
                 --out "$OUT/gangs_w$W" 2>&1 | tail -30 ;;
    readme)    # the README's GPU guide at W=1 (one GPU): hardware=h200_2 alone picks the gpu eval profile,
               # results at a file:// URI, two runs of the same set compared (nothing may be flagged)
               mkdir -p /tmp/w1 /tmp/ar_samples && cp -r samples/replay/all_reduce /tmp/ar_samples/
               sed 's/world_sizes=dict(min=2)/world_sizes=dict(min=1)/' problems/all_reduce.py > /tmp/w1/all_reduce.py
               python3 -m pkb_ray.sweep hardware=h200_2 --cfg job 2>&1 | sed -n '/^eval:/,/^[a-z_]*:$/p' | head -30
               python3 -m pkb_ray.sweep hardware=h200_2 eval=cpu 2>&1 | tail -4; echo "mismatch rc=${PIPESTATUS[0]}"
               for r in a b; do
                 timeout 200 python3 -m pkb_ray.sweep problems_dir=/tmp/w1 hardware=h200_2 'hardware.world_sizes=[1]' \
                   hardware.gpus_per_node=1 model.samples=/tmp/ar_samples wandb=disabled ray.include_dashboard=false \
                   hydra.run.dir=/tmp/readme_$r results_dir=file:///tmp/readme_res_$r cache_dir=/tmp/pkb_cache 2>&1 | tail -30
               done
               python3 -m pkb_ray.cli compare file:///tmp/readme_res_a file:///tmp/readme_res_b --out /tmp/readme_cmp 2>&1 | tail -30
               echo "compare rc=${PIPESTATUS[0]}"
               python3 -c "import json; from pkb_ray.results.parquet import read_results; print(json.dumps({r: read_results(f'/tmp/readme_res_{r}')[['sample_index', 'status', 'speedup', 'timing_mode', 'isolation', 'message']].sort_values('sample_index').to_dict('records') for r in 'ab'}, default=str))" | tee "$OUT/readme_sweep.json" ;;
    *) echo "unknown step $step" ;;
  esac 2>&1 | tee "$OUT/$step.log"
done
echo "=== done $(date +%T)"
