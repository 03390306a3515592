"""ParallelKernelBench's own harness and pkb_ray on the same model outputs: verdicts and samples/hour.

    # 1. choose samples (copies in PKB's run-folder layout for pkb_ray, and renamed to the checkout's
    #    current numbers for PKB's run_local.py, which finds a solution by number)
    python -m benchmarks pkb_side_by_side pick --root <pkb checkout> --samples <folder of solutions_*> \\
        --problems allreduce,alltoall --out <pick folder> [--one-per-problem]
    # 2. PKB's harness over them, one `run_local.py --mode eval --measure-perf` per sample (GPU machine)
    python -m benchmarks pkb_side_by_side pkb --root <pkb checkout> --pick <pick folder> --nproc 2 --out pkb.json
    # 3. pkb_ray over the same folder: python -m pkb_ray.sweep problems=pkb pkb.root=<checkout>
    #    model.samples=<pick folder>/pkb_ray hardware=h200_2 eval=gpu ... (timed from outside)
    # 4. side by side
    python -m benchmarks pkb_side_by_side compare --pkb pkb.json --results <run>/results --pkb-ray-seconds S

``pkb`` and ``compare`` write JSON to ``--out`` (default: docs/benchmarks/data/pkb_side_by_side_<date-time>.json);
``pick``'s ``--out`` is the folder of samples it makes.

PKB's verdict per sample is its harness's last line ("all trials match" or "mismatch"); a sample
whose run_local exits otherwise (no outputs, crash, time limit) counts as failed, as PKB counts it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common
from pkb_ray.pkb.checkout import references
from pkb_ray.pkb.solutions import read_solutions


def pick(args, run: common.Run) -> None:
    refs = {r.problem_id: r for r in references(args.root)}
    wanted = [f"pkb_{p.lower()}" for p in args.problems.split(",")]
    rows = [r for r in read_solutions(args.samples) if r["problem_id"] in wanted and r["backend"] in args.backends]
    if args.one_per_problem:  # one each, the models taken in turn
        chosen, models = [], sorted({r["model"] + "/" + r["backend"] for r in rows})
        for i, pid in enumerate(wanted):
            mine = [r for r in rows if r["problem_id"] == pid]
            order = models[i % len(models):] + models[:i % len(models)]
            found = next((r for m in order for r in mine if r["model"] + "/" + r["backend"] == m), None)
            chosen += [found] if found else []
        rows = chosen
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    manifest = []
    for r in rows:
        meta = r["metadata"]
        run_dir = f"solutions_{r['backend']}_{meta.get('precision', 'bf16')}_{meta.get('hardware', 'h100_8')}_" \
                  f"{meta.get('provider', 'x')}_{r['model']}"
        (out / "pkb_ray" / run_dir).mkdir(parents=True, exist_ok=True)
        (out / "pkb_ray" / run_dir / meta["file"]).write_text(r["source"])
        ref = refs[r["problem_id"]]
        stem = f"{ref.number}_{ref.name}"
        pkb_dir = out / "pkb" / f"{r['model']}__{r['backend']}"
        pkb_dir.mkdir(parents=True, exist_ok=True)
        (pkb_dir / f"{stem}_{r['backend']}.py").write_text(r["source"])
        manifest.append({"model": r["model"], "backend": r["backend"], "problem_id": r["problem_id"],
                         "number": ref.number, "file": meta["file"], "pkb_dir": str(pkb_dir.relative_to(out))})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"{len(manifest)} samples in {out}")


def run_pkb(args, run: common.Run) -> None:
    pick_dir = Path(args.pick).resolve()
    manifest = json.loads((pick_dir / "manifest.json").read_text())
    rows, t_start = [], time.monotonic()
    out = run.out(args.out)
    for m in manifest:
        if args.budget_s and time.monotonic() - t_start > args.budget_s:
            break
        cmd = [sys.executable, "run_local.py", "--nproc-per-node", str(args.nproc), "--mode", "eval",
               "--problem", str(m["number"]), "--solution", m["backend"],
               "--solutions-dir", str(pick_dir / m["pkb_dir"]), *(["--measure-perf"] if args.measure_perf else [])]
        t0 = time.monotonic()
        try:
            done = subprocess.run(cmd, cwd=args.root, capture_output=True, text=True, timeout=args.timeout)
            text, rc = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            text, rc = f"timed out after {args.timeout} s\n{exc.stdout or ''}", None
        seconds = time.monotonic() - t0
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() in ("all trials match", "mismatch")]
        verdict = lines[-1] if lines else "no verdict"
        rows.append({**m, "pkb": verdict == "all trials match", "pkb_says": verdict, "rc": rc,
                     "seconds": round(seconds, 1), "tail": text[-1500:]})
        print(f"{m['model']:28s} {m['backend']:7s} {m['problem_id']:40s} {verdict:18s} {seconds:6.1f}s", flush=True)
        run.write(out, {"rows": rows, "seconds": time.monotonic() - t_start})
    print("wrote", run.write(out, {"rows": rows, "seconds": time.monotonic() - t_start}))


def compare(args, run: common.Run) -> None:
    from pkb_ray.results.parquet import read_results

    pkb = json.loads(Path(args.pkb).read_text())
    df = read_results(args.results)
    ours = {(r.model, r.backend, r.problem_id): r for r in df.itertuples()}
    table, agree = [], 0
    for row in pkb["rows"]:
        r = ours.get((row["model"], row["backend"], row["problem_id"]))
        if r is None:
            continue
        same = bool(r.pkb_verdict) == row["pkb"]
        agree += same
        table.append({"model": row["model"], "backend": row["backend"], "problem_id": row["problem_id"],
                      "pkb_harness": row["pkb_says"], "pkb_ray_status": r.status, "pkb_ray_pkb_verdict": r.pkb_verdict,
                      "pkb_harness_s": row["seconds"], "pkb_ray_eval_s": round(r.eval_seconds, 1),
                      "speedup": r.speedup})
    n = len(table)
    pkb_s = sum(t["pkb_harness_s"] for t in table)
    summary = {"samples": n, "pkb_samples_per_hour": 3600 * n / pkb_s if pkb_s else None,
               "pkb_ray_samples_per_hour": 3600 * n / args.pkb_ray_seconds if args.pkb_ray_seconds else None,
               "pkb_verdict_agrees": agree}
    if summary["pkb_samples_per_hour"] and summary["pkb_ray_samples_per_hour"]:
        summary["ratio"] = summary["pkb_ray_samples_per_hour"] / summary["pkb_samples_per_hour"]
    print(json.dumps(summary, indent=1))
    for t in table:
        print(t)
    print("wrote", run.write(run.out(args.out), {"summary": summary, "rows": table}))


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = argparse.ArgumentParser(prog=f"python -m benchmarks {run.name}", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pick")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--samples", type=Path, required=True)
    p.add_argument("--problems", required=True, help="comma-separated PKB names (allreduce,alltoall,...)")
    p.add_argument("--backends", default="cuda,triton")
    p.add_argument("--one-per-problem", action="store_true")
    p.add_argument("--out", required=True)
    p = sub.add_parser("pkb")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--pick", required=True)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--budget-s", type=float, default=0, help="start no sample after this many seconds")
    p.add_argument("--no-measure-perf", dest="measure_perf", action="store_false")
    p.add_argument("--out", type=Path, help="the JSON to write (default: under docs/benchmarks/data)")
    p = sub.add_parser("compare")
    p.add_argument("--pkb", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--pkb-ray-seconds", type=float, default=0)
    p.add_argument("--out", type=Path, help="the JSON to write (default: under docs/benchmarks/data)")
    args = ap.parse_args(argv)
    if getattr(args, "backends", None):
        args.backends = args.backends.split(",")
    {"pick": pick, "pkb": run_pkb, "compare": compare}[args.cmd](args, run)
    return 0
