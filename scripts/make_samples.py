"""A large, varied sample set derived from the problems and the expert kernels, for benchmarks and demos.

    .venv/bin/python scripts/make_samples.py --per-problem 250 --models alpha,beta --out samples/synthetic.jsonl

Each sample starts from a base (the problem's reference, or a kernel of kernels/ for it) and gets
one variant, drawn with the weights below. Every row says in ``metadata.expect`` which status it
must get (``a|b`` where the outcome depends on the hardware) and in ``metadata.variant`` what
was done to it. Every sample but ``copy`` carries its own ``# sample: N`` line, so exact duplicates come at the
``copy`` rate (~15%), which gives the pipeline's dedup realistic work.

variant      what                                                    expect
copy         the reference, verbatim (a duplicate of other copies)   correct
cosmetic     the reference with a comment added                      correct
twice        does the work twice (a slower candidate)                correct
synced       barriers around the work (slower)                       correct
kernel       an expert kernel of kernels/ verbatim                   correct
off_by_one   the output shifted by one element                       wrong_output
averaged     a reduction divided by the world size (wrong reduction) wrong_output
stale        caches its first answer and returns it again            wrong_output
racy         an expert kernel without its closing barrier            correct|wrong_output (a race: GPU only)
hang         the last rank never joins                               timeout
crash        the last rank exits mid-call                            crash
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from pkb_ray.generate.samples import read_samples
from pkb_ray.problem import load_problems

REPO = Path(__file__).resolve().parent.parent

WEIGHTS = {"copy": 15, "cosmetic": 15, "twice": 8, "synced": 8, "kernel": 10, "off_by_one": 10, "averaged": 8,
           "stale": 10, "racy": 4, "hang": 1, "crash": 1}
EXPECT = {"off_by_one": "wrong_output", "averaged": "wrong_output", "stale": "wrong_output",
          "racy": "correct|wrong_output", "hang": "timeout", "crash": "crash"}
REDUCTIONS = {"all_reduce", "reduce", "reduce_scatter"}
CLOSING_BARRIER = "    handle.barrier(channel=0)\n    return out\n"

# Wrappers keep the reference's parameters ({params}) and call the base, renamed _base.
WRAP = {
    "twice": "    _base({params})\n    return _base({params})\n",
    "synced": "    dist.barrier()\n    out = _base({params})\n    dist.barrier()\n    return out\n",
    "off_by_one": "    out = _base({params})\n    return _shift(out)\n",
    "averaged": "    out = _base({params})\n    return _scale(out, 1.0 / dist.get_world_size())\n",
    "stale": "    if not _seen:\n        _seen.append(_base({params}))\n    return _seen[0]\n",
    "hang": ("    if dist.get_rank() == dist.get_world_size() - 1:\n        while True:\n            time.sleep(0.1)\n"
             "    return _base({params})\n"),
    "crash": "    if dist.get_rank() == dist.get_world_size() - 1:\n        os._exit(3)\n    return _base({params})\n",
}
HELPERS = '''

# --- variant helpers ---
import os  # noqa: E402
import time  # noqa: E402

import torch.distributed as dist  # noqa: E402

_seen = []


def _shift(out):
    if isinstance(out, (tuple, list)):
        return type(out)(_shift(o) for o in out)
    return out.roll(1) if out.numel() > 1 else out


def _scale(out, factor):
    if isinstance(out, (tuple, list)):
        return type(out)(_scale(o, factor) for o in out)
    return out * factor
'''


def wrap(base: str, variant: str, params: list[str]) -> str:
    """The base with its solution renamed and a new solution(...) of the same parameters around it."""
    renamed = base.replace("def solution(", "def _base(", 1)
    body = WRAP[variant].format(params=", ".join(params))
    return f"{renamed}{HELPERS}\n\ndef solution({', '.join(params)}):\n{body}"


def header(expect: str, variant: str, base: str) -> str:
    return f"# expect: {expect}\n# variant: {variant} of {base}\n"


def strip_header(source: str) -> str:
    lines = source.splitlines(keepends=True)
    while lines and lines[0].startswith("# ") and ":" in lines[0]:
        lines.pop(0)
    return "".join(lines)


def make(problem, kernels: list[dict], variant: str, rng: random.Random, serial: str) -> tuple[str, str, str]:
    """(source, expect, backend) of one sample; only ``copy`` repeats a source verbatim."""
    source, expect, backend = _make(problem, kernels, variant, rng)
    if variant != "copy":
        first, _, rest = source.partition("\n# variant:")
        source = f"{first}\n# sample: {serial}\n# variant:{rest}"
    return source, expect, backend


def _make(problem, kernels: list[dict], variant: str, rng: random.Random) -> tuple[str, str, str]:
    reference = problem.source()
    if variant in ("kernel", "racy"):
        k = rng.choice(kernels)
        body = strip_header(k["source"])
        if variant == "racy":
            body = body.replace(CLOSING_BARRIER, "    return out\n")
        name = k["metadata"]["file"]
        return header(EXPECT.get(variant, "correct"), variant, name) + body, EXPECT.get(variant, "correct"), k["backend"]
    if variant == "copy":
        return header("correct", "copy", problem.id) + reference, "correct", "torch"
    if variant == "cosmetic":
        note = "# same algorithm as the reference, written again\n"
        return header("correct", "cosmetic", problem.id) + note + reference, "correct", "torch"
    source = wrap(reference, variant, problem.signature)
    expect = EXPECT.get(variant, "correct")
    return header(expect, variant, problem.id) + source, expect, "torch"


def generate(per_problem: int, models: list[str], seed: int, problem_ids: list[str] | None = None) -> list[dict]:
    problems = load_problems()
    kernels = read_samples(REPO / "kernels", model="kernels")
    rows = []
    for model in models:
        for pid in sorted(problem_ids or problems):
            rng = random.Random(f"{seed}/{model}/{pid}")  # a problem's samples do not depend on the others
            problem = problems[pid]
            mine = [k for k in kernels if k["problem_id"] == pid]
            weights = {v: w for v, w in WEIGHTS.items()
                       if (v not in ("kernel", "racy") or mine) and (v != "averaged" or pid in REDUCTIONS)
                       and (v != "racy" or any(CLOSING_BARRIER in k["source"] for k in mine))}
            for index in range(per_problem):
                variant = rng.choices(list(weights), weights=list(weights.values()))[0]
                pool = [k for k in mine if variant != "racy" or CLOSING_BARRIER in k["source"]]
                source, expect, backend = make(problem, pool, variant, rng, f"{model}/{index}")
                rows.append({"problem_id": pid, "model": model, "sample_index": index, "backend": backend,
                             "source": source, "metadata": {"expect": expect, "variant": variant}})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-problem", type=int, default=100)
    ap.add_argument("--models", default="synthetic")
    ap.add_argument("--problems", help="comma-separated problem ids (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help=".jsonl or .parquet")
    args = ap.parse_args()
    rows = generate(args.per_problem, args.models.split(","), args.seed,
                    args.problems.split(",") if args.problems else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), args.out)
    else:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    variants: dict[str, int] = {}
    for r in rows:
        variants[r["metadata"]["variant"]] = variants.get(r["metadata"]["variant"], 0) + 1
    distinct = len({r["source"] for r in rows})
    print(f"{len(rows)} samples ({distinct} distinct sources) -> {args.out}; variants: {variants}")


if __name__ == "__main__":
    main()
