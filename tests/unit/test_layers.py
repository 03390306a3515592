"""Imports point down only (../shared/DESIGN.md, "Layers"): a module imports from its own layer or
below. A new module must be placed here, so the direction stays a decision, not an accident."""

import ast
from pathlib import Path

from conftest import REPO

LAYERS = {  # 7 = the command, 6 = entry points ... 1 = pure data and rules
    7: ["cli"],
    6: ["sweep", "baselines", "entry", "listing", "submit", "serve.main", "serve.app", "api"],
    5: ["pipeline", "refine", "tracking", "serve.engine", "serve.answers", "serve.reward", "serve.adapters",
        "serve.adapters.labels", "serve.adapters.verl", "serve.adapters.openrlhf", "summary", "summary.run", "summary.tables", "summary.sizes",
        "summary.figures", "summary.sections", "summary.render_html", "summary.render_markdown",
        "summary.render_text", "summary.render_json", "summary.render_wandb", "summary.render_wandb_report", "summary.pages", "summary.cli", "summary.publish",
        "summary.compare", "summary.render_compare", "summary.stored"],
    4: ["stages.compile", "stages.gang_pool", "stages.generate", "stages.validate", "llm", "prompt", "telemetry"],
    3: ["gang", "cluster", "spread", "harness", "references", "rounds", "rank_pool", "ranks", "problem_check", "zygote"],
    2: ["runner", "runner.extensions", "runner.launch", "runner.protocol", "runner.rank", "runner.resident",
        "runner.session", "runner.clean", "runner.candidate", "runner.watch", "runner.graphs", "runner.loading",
        "runner.tensor_io", "runner.trace", "runner.zygote", "runner.namespaces", "runner.cuda_ipc", "cuda", "sandbox", "allowlist", "reaper", "freezer",
        "memory", "round_checks"],
    1: ["problem", "schema", "metrics", "intervals", "timing", "correctness", "config", "placement", "results", "samples",
        "selection", "verdict", "wire", "paths", "names", "scheduler", "interference", "deadlines", "formats",
        "backend_rules", "serve", "serve.client", "pkb", "pkb.checkout", "pkb.runtime", "pkb.shims", "pkb.solutions", "pkb.format",
        "pkb.settings", "pkb.verdict", "problem_helpers", "compose", "storage", "keys", "staging"],
}
PURE = [  # no Ray, no processes
    "problem", "problem_helpers", "schema", "metrics", "intervals", "timing", "correctness", "config", "placement", "results",
    "samples", "selection", "verdict", "wire", "paths", "names", "scheduler", "interference", "deadlines", "formats",
    "backend_rules", "pkb", "pkb.checkout", "pkb.runtime", "pkb.shims", "pkb.solutions", "pkb.format", "pkb.settings",
    "pkb.verdict", "compose", "storage", "keys", "staging"]
LAYER = {f"pkb_ray.{m}": n for n, mods in LAYERS.items() for m in mods}


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted((REPO / "pkb_ray").rglob("*.py")):
        name = ".".join(f.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        if name != "pkb_ray" and name != "pkb_ray.stages":
            out[name] = f
    return out


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_every_module_has_a_layer():
    assert sorted(set(_modules()) - set(LAYER)) == []


def test_imports_point_down():
    modules = _modules()
    upward = []
    for name, path in modules.items():
        for target in _imports(path) & set(modules):
            if LAYER[target] > LAYER[name]:
                upward.append(f"{name} (layer {LAYER[name]}) imports {target} (layer {LAYER[target]})")
    assert upward == []


def test_the_pure_modules_start_nothing():
    modules = _modules()
    for name in PURE:
        heavy = {i.split(".")[0] for i in _imports(modules[f"pkb_ray.{name}"])} & {"ray", "subprocess", "multiprocessing"}
        assert not heavy, f"{name} imports {heavy}"


def test_the_runner_is_split_by_trust_into_small_modules():
    # what the clean set runs, what a candidate's set runs, the watches, graph capture and
    # candidate loading each in a module of its own (issue 28); none over 300 lines
    runner = REPO / "pkb_ray" / "runner"
    sizes = {f.name: len(f.read_text().splitlines()) for f in runner.glob("*.py")}
    assert {"clean.py", "candidate.py", "session.py", "watch.py", "graphs.py", "loading.py"} <= set(sizes)
    assert "steps.py" not in sizes
    assert {name: n for name, n in sizes.items() if n > 300} == {}
    clean = _imports(runner / "clean.py")
    assert not any(m.startswith("pkb_ray.runner.candidate") for m in clean)  # the clean set never loads one


def test_a_runs_figures_are_computed_in_one_place():
    """The scores are computed by pkb_ray.summary.run only; every view renders its RunSummary."""
    scores = {f"pkb_ray.metrics.{n}" for n in ("summarize", "curves", "fast_p_curve", "final_and_rounds", "as_scored")}
    found = [f"{name} imports {sorted(scores & _imports(path))}" for name, path in _modules().items()
             if name != "pkb_ray.summary.run" and scores & _imports(path)]
    assert found == []


def test_the_sweep_entry_point_composes_few_modules():
    # issue 29: sweep.py imported 18 pkb_ray modules; one job's inputs (selection.job_inputs), its
    # first samples (generate.first_round) and its outputs (summary.publish) now come whole
    modules = _modules()
    used = {i for i in _imports(modules["pkb_ray.sweep"]) if i in modules}
    assert len(used) <= 8, sorted(used)


def test_only_the_pkb_package_knows_parallelkernelbench():
    """The core reaches ParallelKernelBench through pkb_ray.formats only: its config section, result
    column and usage example come from pkb_ray.pkb.format too."""
    import re

    named = re.compile(r"ParallelKernelBench|\bPKB\b|\bpkb_ray\.pkb\b|[\"']pkb[\"']")
    found = [f"{name}:{n}: {line.strip()}" for name, path in _modules().items()
             if not name.startswith("pkb_ray.pkb")
             for n, line in enumerate(path.read_text().splitlines(), 1) if named.search(line)]
    assert found == []


def _trees():
    """Every .py under pkb_ray (the package __init__ files too), parsed: (path from the repo, tree)."""
    for f in sorted((REPO / "pkb_ray").rglob("*.py")):
        yield f.relative_to(REPO), ast.parse(f.read_text())


def test_no_function_is_longer_than_60_lines():
    # a long function hides its steps: helpers named for them say what each part is for
    long = [f"{path}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)" for path, tree in _trees()
            for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            and fn.end_lineno - fn.lineno + 1 > 60]
    assert not long, "\n".join(long)


def test_no_global_or_nonlocal_state():
    # state rebound from inside a function is hard to follow and to reset in a test: an object holds it
    found = [f"{path}:{node.lineno}" for path, tree in _trees()
             for node in ast.walk(tree) if isinstance(node, (ast.Global, ast.Nonlocal))]
    assert not found, "\n".join(found)


def test_rank_set_roles_are_named_by_the_role_enum_only():
    # a role spelt as a string in several modules drifts; pkb_ray.names.Role is the one spelling
    # (runner/loading.py names the candidate's module "candidate": a module name, not a role)
    # (words inside an f-string are prose: "candidate not captured")
    spelt = []
    for path, tree in _trees():
        if path.as_posix() in ("pkb_ray/names.py", "pkb_ray/runner/loading.py"):
            continue
        prose = {id(n) for f in ast.walk(tree) if isinstance(f, ast.JoinedStr) for n in ast.walk(f)}
        spelt += [f"{path}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and node.value in ("clean", "candidate") and id(node) not in prose]
    assert not spelt, "\n".join(spelt)
