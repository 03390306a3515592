"""The compile stage's torch-extension builds (PKB's load_inline) over a folder of PKB solutions.

    python3 -m benchmarks pkb_prebuild --root <pkb checkout> --samples <folder of solutions_*> \\
        --workers 8 --out /tmp/prebuild.json        # on a machine with a CUDA build of torch and nvcc

Each sample is built as the compile stage builds it (pkb_ray.pipeline.compile.build_inline: a
sandboxed import of the sample, its builder calls whose arguments are known at import made there),
``--workers`` at a time. Then each build is checked the way a rank uses it: a fresh process installs
the rank's hook (pkb_ray.runner.extensions.install) over the sample's folder, imports the sample and
makes the same calls, which must import the prebuilt libraries and build nothing. Per sample: the
outcome, seconds, and the libraries imported and built in the check.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import common
from pkb_ray.pipeline.compile import build_inline, build_settings
from pkb_ray.pkb.solutions import read_solutions
from pkb_ray.runner import extensions

CHECK = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from pkb_ray.runner import extensions
from pkb_ray.runner.loading import load_candidate
counts = extensions.install(Path(sys.argv[2]), Path(sys.argv[4]), sys.argv[5])
module = load_candidate(sys.argv[1])
for call in extensions.builder_calls(Path(sys.argv[1]).read_text()):
    try:
        extensions.make_call(call, module, "candidate.py")
    except Exception:
        pass
print("CHECK " + json.dumps(counts))
"""


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--samples", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--isolation", default="sandbox")
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args(argv)
    out_path = run.out(args.out)
    rows = [r for r in read_solutions(args.samples) if r["backend"] in ("cuda", "triton")
            and extensions.builds_inline(r["source"])]
    rows = rows[:args.limit] if args.limit else rows
    cache = args.cache or Path(tempfile.mkdtemp(prefix="prebuild-"))
    settings = build_settings(args.arch, cache, 300, args.isolation, inline_timeout_s=600)
    paths = (str(args.root.resolve()),)
    t0 = time.monotonic()

    def one(row):
        out = build_inline(row["source"], settings, paths)
        return {"model": row["model"], "backend": row["backend"], "problem_id": row["problem_id"],
                "file": row["metadata"]["file"], **{k: v for k, v in out.items() if k != "error"},
                "error": out.get("error", "")[-1500:]}

    with ThreadPoolExecutor(args.workers) as pool:
        built = list(pool.map(one, rows))
    wall = time.monotonic() - t0
    for b in built:
        print(f"{b['model']:22s} {b['backend']:6s} {b['problem_id']:44s} {b['seconds']:6.1f}s built={b.get('built')} "
              f"skipped={b.get('skipped')} {'ERROR ' + b['error'][:120] if b['error'] else ''}", flush=True)
    # the rank's side: a fresh process imports what was built, and builds nothing
    with tempfile.TemporaryDirectory() as tmp:
        def check(i: int) -> None:
            b, row = built[i], rows[i]
            src = Path(tmp) / f"{i}.py"
            src.write_text(row["source"])
            done = subprocess.run([sys.executable, "-c", CHECK, str(src), b["folder"], paths[0], str(Path(tmp) / f"b{i}"),
                                   extensions.arch_list(args.arch)], capture_output=True, text=True, timeout=600)
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("CHECK ")), None)
            b["rank_check"] = json.loads(line[6:]) if line else {"failed": (done.stderr or done.stdout)[-600:]}

        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(check, [i for i, b in enumerate(built) if b.get("folder") and b.get("built")]))
    ok = [b for b in built if b.get("built") and not b["error"]]
    summary = {"samples": len(built), "workers": args.workers, "wall_s": round(wall, 1),
               "built": len(ok), "build_errors": sum(bool(b["error"]) for b in built),
               "nothing_to_build_at_import": sum(not b["error"] and not b.get("built") for b in built),
               "median_build_s": round(statistics.median(b["seconds"] for b in ok), 1) if ok else None,
               "rank_imports_prebuilt": sum(b.get("rank_check", {}).get("prebuilt", 0) > 0
                                            and b.get("rank_check", {}).get("built", 1) == 0 for b in ok)}
    print(json.dumps(summary, indent=1))
    print("wrote", run.write(out_path, {"summary": summary, "rows": built}))
    return 0
