"""Prompts: what a model is asked for one problem and backend, and the feedback of a refinement round.

    python -m pkb_ray.generate.prompt problem=all_reduce backend=cuda [hardware=h200_2 eval.size=default ...]

prints the system and user messages. The text lives in templates, ``conf/prompts/*.md``
(``${name}`` placeholders, Python's string.Template): ``system.md``, ``task.md`` (the rules, the
hardware, the reference source, the backend's notes, a worked example from ``kernels/``),
``backend_{torch,cuda,triton}.md`` and ``feedback.md``.
"""

from __future__ import annotations

import sys
from string import Template

from pkb_ray.problem import Problem
from pkb_ray.spec.config import EvalConfig, HardwareConfig, SweepConfig
from pkb_ray.spec.names import Backend, Status
from pkb_ray.spec.paths import CONF_DIR, KERNELS_DIR

TEMPLATES = CONF_DIR / "prompts"
# worked examples per backend, in order of preference: the first of another problem is shown
EXAMPLES = {
    "torch": ["all_reduce/01_symm_mem_two_shot.py"],
    "cuda": ["all_reduce/02_cuda_one_shot.py", "all_gather/01_cuda_peer_gather.py"],
    "triton": ["all_reduce/04_triton_one_shot.py"],
}
MAX_FEEDBACK_CHARS = 3000


def _template(name: str) -> Template:
    return Template((TEMPLATES / name).read_text())


def describe_hardware(hw: HardwareConfig, world_size: int) -> str:
    multicast = "off" if not hw.nvlink_multicast else "as the environment sets it"
    where = f"{hw.arch} GPUs" if hw.device == "cuda" else "CPU processes (gloo)"
    compute = ", ".join(f"{t:g} TFLOPS {d}" for d, t in hw.tflops_by_dtype.items()) or f"{hw.tflops:g} TFLOPS"
    return (f"{world_size} ranks, one per device, on {where} (profile {hw.name}: {hw.gpus_per_node} per node, "
            f"{hw.nodes} node(s)); interconnect {hw.link_gbps:g} GB/s per direction per device, memory "
            f"{hw.hbm_gbps:g} GB/s, {compute}; NVLink multicast {multicast}")


def example_for(backend: str, problem_id: str) -> str:
    for rel in EXAMPLES.get(backend, []):
        if not rel.startswith(problem_id + "/"):
            return (KERNELS_DIR / rel).read_text()
    return "# (no example of another problem for this backend)"


def tolerances(problem: Problem, cfg: EvalConfig) -> str:
    parts = []
    for dtype in problem.meta.dtypes:
        tol = cfg.tolerance_override(problem.id, dtype) or problem.tolerance(dtype)
        parts.append(f"{dtype}: atol={tol.atol:g}, rtol={tol.rtol:g}")
    return "; ".join(parts)


def messages(problem: Problem, backend: str, cfg: SweepConfig, world_size: int | None = None) -> list[dict]:
    """The chat messages asking for one solution of ``problem`` in ``backend``."""
    sizes = cfg.hardware.world_sizes or [lay.world_size for lay in cfg.hardware.spread_layouts]
    w = world_size or next((x for x in sizes if problem.meta.world_sizes.supports(x)), sizes[0])
    label, knobs = problem.size(cfg.eval.size)
    fields = {
        "problem_id": problem.id, "problem_name": problem.meta.name, "signature": ", ".join(problem.signature),
        "world_size": w, "tolerances": tolerances(problem, cfg.eval), "hardware": describe_hardware(cfg.hardware, w),
        "size": ", ".join(f"{k}={v}" for k, v in knobs.items()), "dtype": cfg.eval.dtype or problem.meta.dtypes[0],
        "reference": problem.source().strip(), "backend": backend, "arch": cfg.hardware.arch or "sm_90a",
        "example": example_for(backend, problem.id).strip(),
    }
    fields["backend_notes"] = _template(f"backend_{backend}.md").safe_substitute(fields).strip()
    return [{"role": "system", "content": _template("system.md").safe_substitute(fields).strip()},
            {"role": "user", "content": _template("task.md").safe_substitute(fields).strip()}]


def feedback(result: dict, cfg: SweepConfig, slow_below: float) -> str:
    """What the model is told about its last answer (a result row): status, the evaluator's message or
    the measured speed, and what to do next."""
    status = result["status"]
    if status == Status.CORRECT.value:
        speed = result.get("speedup")
        sol = result.get("sol_fraction")
        details = (f"Correct on every rank. Speedup over the reference: {speed:.2f}x (reference "
                   f"{result.get('ref_time_us') or 0:.1f} us, yours {result.get('cand_time_us') or 0:.1f} us per call)"
                   + (f"; {100 * sol:.1f}% of the speed-of-light bound." if sol else ".")) if speed else "Correct."
        goal = f" that is faster (at least {slow_below:g}x the reference's speed)"
    else:
        message = (result.get("message") or "").strip()
        if len(message) > MAX_FEEDBACK_CHARS:
            message = message[:MAX_FEEDBACK_CHARS // 2] + "\n[...]\n" + message[-MAX_FEEDBACK_CHARS // 2:]
        rank = result.get("failed_rank")
        details = (f"Failed on rank {int(rank)}.\n" if rank is not None and rank == rank else "") + \
            f"What the evaluator reported:\n{message or '(no message)'}"
        goal = " that fixes this and stays correct on every rank"
    sizes = int(result.get("sizes_evaluated") or 1)
    if sizes > 1:  # a size sweep (see stages.generate.worst_per_sample): which size this is
        which = "where it was slowest against the reference" if status == Status.CORRECT.value else "where it failed"
        details = (f"At input size {result.get('size')} (of the {sizes} sizes it was evaluated at, one {which}):"
                   f"\n{details}")
    return _template("feedback.md").safe_substitute(
        hardware=describe_hardware(cfg.hardware, int(result.get("world_size") or cfg.hardware.layouts[0].world_size)),
        world_size=result.get("world_size"), status=status, details=details, goal=goal).strip()


def main(argv: list[str]) -> int:
    import difflib

    from pkb_ray.problem import load_problems
    from pkb_ray.spec.compose import compose_config
    from pkb_ray.spec.config import ConfigError

    problem_id = next((a.split("=", 1)[1] for a in argv if a.startswith("problem=")), None)
    overrides = [a for a in argv if not a.startswith("problem=")]
    if not problem_id:
        print("usage: pkb-ray prompt problem=<id> [backend=torch|cuda|triton] [overrides ...]", file=sys.stderr)
        return 2
    try:
        cfg = compose_config(overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problems = load_problems(cfg.problems_dir)
    if problem_id not in problems:
        close = difflib.get_close_matches(problem_id, list(problems), n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}?" if close else f"{len(problems)} problems"
        print(f"error: problem: unknown id {problem_id!r}; {hint} (pkb-ray ls problems lists them)", file=sys.stderr)
        return 2
    backend = (cfg.backend.backends or [Backend.TORCH])[0]
    for m in messages(problems[problem_id], backend, cfg):
        print(f"===== {m['role']} =====\n{m['content']}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
