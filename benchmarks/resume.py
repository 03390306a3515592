"""A long synthetic sweep killed with SIGKILL at random moments, resumed each time, until it ends:
every sample must end with exactly one result, and nothing a killed driver started may outlive it.

    .venv/bin/python -m benchmarks resume --samples 4000 --distinct 100 --kills 3 --out docs/benchmarks/data/bench_resume_cpu.json

The sample set: ``--distinct`` samples of scripts/make_samples.py (every variant: correct, wrong,
hanging, crashing) over a few collectives, given ``--samples`` identities in turn (sample_index 0..N-1).
Identical sources are evaluated once and the verdict copied (pkb_ray.pipeline.wiring), so the run costs
about ``--distinct`` evaluations while its results path (the sink, resume, the copies) handles
``--samples`` rows. Each attempt is ``python -m pkb_ray.sweep ... results_dir=<one folder>``; the
first ``--kills`` are killed with SIGKILL at a moment drawn uniformly from [--kill-after-s, --kill-before-s]
after their start. The script notes each attempt's process tree (its Ray, gangs, ranks) twice a second; after a kill
it waits ``--orphan-wait-s`` and lists those still alive (pkb_ray/isolation/reaper.py must have ended them).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common
from pkb_ray.results.parquet import RESULT_KEY, read_results
from pkb_ray.spec.schema import is_final

REPO = common.REPO

PROBLEMS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]


def sample_rows(samples: int, distinct: int, seed: int) -> list[dict]:
    """``samples`` rows cycling over ``distinct`` generated sources, each row its own identity."""
    per_problem = max(1, distinct // len(PROBLEMS))
    bases = common.script("make_samples").generate(per_problem, ["synthetic"], seed, PROBLEMS)[:distinct]
    return [{**bases[i % len(bases)], "model": "synthetic", "sample_index": i} for i in range(samples)]


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process (zombies excluded)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z":
                continue
            out[int(entry.name)] = (int(fields[1]), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace"))
        except OSError:
            continue
    return out


def descendants(root: int, table: dict[int, tuple[int, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    out, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def attempt(args, samples_file: Path, results: Path, work: Path, n: int, kill_at: float | None) -> dict:
    """One run of the sweep; killed with SIGKILL at ``kill_at`` seconds, or left to finish. Its
    process tree is noted twice a second, to tell afterwards what outlived it."""
    cmd = [sys.executable, "-m", "pkb_ray.sweep", f"model.samples={samples_file}", "model.name=synthetic",
           f"results_dir={results}", f"hydra.run.dir={work / f'attempt{n}'}", "wandb=disabled",
           "ray.include_dashboard=false", f"cache_dir={work / 'cache'}", f"problems.ids=[{','.join(PROBLEMS)}]"]
    log = open(work / f"attempt{n}.log", "w")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    record: dict = {"attempt": n, "rows_before": len(read_results(results)) if results.exists() else 0}
    tree: dict[int, str] = {}
    deadline = None if kill_at is None else started + kill_at
    while proc.poll() is None and (deadline is None or time.monotonic() < deadline):
        table = processes()
        tree.update({pid: table[pid][1] for pid in descendants(proc.pid, table)})
        time.sleep(0.5)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        record.update(killed=True, killed_at_s=round(kill_at, 1), processes_seen=len(tree))
        time.sleep(args.orphan_wait_s)
        alive = processes()
        record["alive_after_s"] = args.orphan_wait_s
        record["orphans"] = sorted(cmd[:120] for pid, cmd in tree.items() if pid in alive and alive[pid][1] == cmd)
    else:
        record.update(killed=False, exit=proc.returncode)
    log.close()
    record["seconds"] = round(time.monotonic() - started, 1)
    record["rows_after"] = len(read_results(results)) if results.exists() else 0
    print(json.dumps(record), flush=True)
    return record


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--distinct", type=int, default=100)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--kill-after-s", type=float, default=5.0)
    ap.add_argument("--kill-before-s", type=float, default=150.0)
    ap.add_argument("--orphan-wait-s", type=float, default=15.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = run.out(args.out)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="pkb_resume_"))
    rows = sample_rows(args.samples, args.distinct, args.seed)
    samples_file = work / "samples.jsonl"
    samples_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = work / "results"
    t0 = time.monotonic()
    attempts = [attempt(args, samples_file, results, work, n, rng.uniform(args.kill_after_s, args.kill_before_s))
                for n in range(args.kills)]
    attempts.append(attempt(args, samples_file, results, work, args.kills, None))
    df = read_results(results)
    final = df[[is_final(s, m) for s, m in zip(df["status"], df["message"])]]
    keys = set(zip(*(final[k].tolist() for k in RESULT_KEY)))
    summary = {
        "samples": args.samples, "distinct_sources": len({r["source"] for r in rows}),
        "rows": len(df), "final_rows": len(final), "distinct_results": len(keys),
        "samples_with_a_result": final["sample_key"].nunique(),
        "copied_verdicts": int(final["duplicate_of"].fillna("").astype(bool).sum()),
        "statuses": final["status"].value_counts().to_dict(), "attempts": attempts,
        "orphans_after_kills": sum(len(a.get("orphans", [])) for a in attempts),
        "wall_s": round(time.monotonic() - t0, 1), "work": str(work),
        "ok": len(df) == len(keys) == args.samples and final["sample_key"].nunique() == args.samples,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "attempts"}, indent=1))
    print("wrote", run.write(out, summary))
    return 0 if summary["ok"] else 1
