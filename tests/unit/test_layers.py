"""Imports point down only (../shared/DESIGN.md, "Layers"): a module imports from its own layer or
below. A new module must be placed here, so the direction stays a decision, not an accident."""

import ast
import re
from pathlib import Path

from conftest import REPO

LAYERS = {  # 7 = the command, 6 = entry points ... 1 = pure data and rules
    7: ["cli"],
    6: ["sweep", "baselines", "commands.entry", "commands.listing", "commands.submit", "serve.main", "serve.app", "api"],
    5: ["pipeline.wiring", "pipeline.refine", "summary.tracking", "serve.engine", "serve.answers", "serve.reward", "serve.adapters",
        "serve.adapters.labels", "serve.adapters.verl", "serve.adapters.openrlhf", "summary", "summary.run", "summary.tables", "summary.sizes",
        "summary.figures", "summary.sections", "summary.render_html", "summary.render_markdown",
        "summary.render_text", "summary.render_json", "summary.render_wandb", "summary.render_wandb_report", "summary.pages", "summary.cli", "summary.publish",
        "summary.compare", "summary.render_compare", "summary.stored"],
    4: ["pipeline.compile", "pipeline.gang_pool", "generate.stage", "pipeline.validate", "generate.llm", "generate.prompt", "pipeline.telemetry"],
    3: ["pipeline.gang", "pipeline.cluster", "isolation.spread", "evaluate.harness", "evaluate.attempt", "evaluate.figures", "evaluate.rank_sets", "evaluate.steps", "evaluate.screen", "problems.references", "evaluate.rounds", "isolation.rank_pool", "isolation.ranks", "problems.check", "isolation.zygote"],
    2: ["runner", "runner.extensions", "runner.launch", "runner.protocol", "runner.rank", "runner.resident",
        "runner.session", "runner.firing", "runner.clean", "runner.candidate", "runner.watch", "runner.graphs", "runner.loading",
        "runner.tensor_io", "runner.trace", "runner.zygote", "runner.namespaces", "runner.cuda_ipc", "runner.toucher", "cuda", "isolation.sandbox", "isolation.allowlist", "isolation.reaper", "isolation.freezer", "isolation.freeze_group",
        "isolation.memory", "isolation.procfs", "evaluate.round_checks"],
    1: ["problem", "spec.schema", "results.metrics", "results.intervals", "measure.timing", "measure.correctness", "spec.config", "spec.placement", "results.parquet", "generate.samples",
        "pipeline.selection", "evaluate.verdict", "spec.wire", "spec.paths", "spec.names", "pipeline.scheduler", "evaluate.interference", "evaluate.deadlines", "spec.formats",
        "problems.backend_rules", "serve", "serve.client", "pkb", "pkb.checkout", "pkb.runtime", "pkb.shims", "pkb.solutions", "pkb.format",
        "pkb.settings", "pkb.verdict", "problem_helpers", "spec.compose", "results.storage", "measure.keys", "evaluate.staging",
        "problems.ladders"],
}
PURE = [  # no Ray, no processes
    "problem", "problem_helpers", "spec.schema", "results.metrics", "results.intervals", "measure.timing", "measure.correctness", "spec.config", "spec.placement", "results.parquet",
    "generate.samples", "pipeline.selection", "evaluate.verdict", "spec.wire", "spec.paths", "spec.names", "pipeline.scheduler", "evaluate.interference", "evaluate.deadlines", "spec.formats",
    "problems.backend_rules", "pkb", "pkb.checkout", "pkb.runtime", "pkb.shims", "pkb.solutions", "pkb.format", "pkb.settings",
    "pkb.verdict", "spec.compose", "results.storage", "measure.keys", "evaluate.staging", "problems.ladders"]
LAYER = {f"pkb_ray.{m}": n for n, mods in LAYERS.items() for m in mods}
ROOMS = sorted(p.name for p in (REPO / "pkb_ray").iterdir() if (p / "__init__.py").is_file())
LAYER.update({f"pkb_ray.{room}": 1 for room in ROOMS if f"pkb_ray.{room}" not in LAYER})  # docstrings only


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted((REPO / "pkb_ray").rglob("*.py")):
        name = ".".join(f.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        if name != "pkb_ray":
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


def _room(module: str) -> str:
    """The room (a folder of pkb_ray, or a module at its top) that ``pkb_ray.<room>...`` is in."""
    return module.split(".")[1]


def _allowed(room: str) -> set[str]:
    """What a room's ``__init__`` docstring says it may import ("May import: a, b." or "nothing.")."""
    doc = ast.get_docstring(ast.parse((REPO / "pkb_ray" / room / "__init__.py").read_text())) or ""
    found = re.search(r"^May import: ([^.]*)\.$", doc, re.M)
    assert found, f"pkb_ray/{room}/__init__.py's docstring does not say what the room may import"
    return set() if found.group(1) == "nothing" else {r.strip() for r in found.group(1).split(",")}


def test_pkb_ray_is_a_few_rooms_and_a_public_top():
    """Folders by job; at the top only the public surface: the command, the Python API, the Hydra
    jobs, the problem authors' API and the candidates' CUDA loader."""
    top = sorted(p.stem for p in (REPO / "pkb_ray").glob("*.py") if p.stem != "__init__")
    assert len(top) <= 10, top
    assert {"cli", "api", "sweep", "problem", "cuda"} <= set(top)
    assert {"spec", "measure", "runner", "isolation", "evaluate", "pipeline", "results", "summary"} <= set(ROOMS)


def test_each_room_imports_only_what_its_docstring_allows():
    modules = _modules()
    rooms = {room: _allowed(room) for room in ROOMS}
    for room, allowed in rooms.items():
        assert allowed <= set(rooms) | {m.split(".")[1] for m in modules}, f"{room} names an unknown room"
    crossing = [f"{name} imports {target}" for name, path in modules.items() if _room(name) in rooms
                for target in _imports(path) & set(modules)
                if _room(target) != _room(name) and _room(target) not in rooms[_room(name)]]
    assert crossing == []


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
    scores = {f"pkb_ray.results.metrics.{n}" for n in ("summarize", "curves", "fast_p_curve", "final_and_rounds", "as_scored")}
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
    """The core reaches ParallelKernelBench through pkb_ray.spec.formats only: its config section, result
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
    # a role spelt as a string in several modules drifts; pkb_ray.spec.names.Role is the one spelling
    # (runner/loading.py names the candidate's module "candidate": a module name, not a role)
    # (words inside an f-string are prose: "candidate not captured")
    spelt = []
    for path, tree in _trees():
        if path.as_posix() in ("pkb_ray/spec/names.py", "pkb_ray/runner/loading.py"):
            continue
        prose = {id(n) for f in ast.walk(tree) if isinstance(f, ast.JoinedStr) for n in ast.walk(f)}
        spelt += [f"{path}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and node.value in ("clean", "candidate") and id(node) not in prose]
    assert not spelt, "\n".join(spelt)


def test_other_processes_proc_is_read_in_one_module():
    """pkb_ray.isolation.procfs is the one reader of /proc/PID (the freezer, the reaper, the memory
    reads); code inside rank processes (runner/) reads only its own."""
    import re

    per_pid = re.compile(r"/proc/\{")
    found = [f"{path}:{n}" for path, _ in _trees()
             if path.as_posix() != "pkb_ray/isolation/procfs.py" and path.parts[1] != "runner"
             for n, line in enumerate((REPO / path).read_text().splitlines(), 1) if per_pid.search(line)]
    assert found == []


def test_a_sandboxed_process_is_started_one_way():
    """pkb_ray.isolation.sandbox.Spec with start() or run(): no other module builds bwrap's command
    line or the child's limits itself (rank sets, zygote templates, builds all go through them)."""
    own = {"command", "preexec"}
    found = []
    for path, tree in _trees():
        if path.as_posix() == "pkb_ray/isolation/sandbox.py":
            continue
        found += [f"{path}:{node.lineno} sandbox.{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr in own
                  and isinstance(node.value, ast.Name) and node.value.id == "sandbox"]
    assert found == []


def test_benchmark_data_lives_under_its_folder_and_each_file_is_cited():
    """docs/ holds prose; raw benchmark figures are in docs/benchmarks/data/, each cited by a page
    (a file no page names is a figure nobody can find the command of)."""
    docs = REPO / "docs"
    raw = {".json", ".txt", ".csv", ".jsonl", ".parquet"}
    stray = [p.relative_to(REPO).as_posix() for p in docs.rglob("*") if p.is_file() and p.suffix in raw
             and (docs / "benchmarks" / "data") not in p.parents]
    assert stray == []
    pages = "\n".join(p.read_text() for p in [REPO / "README.md", *docs.rglob("*.md")])
    uncited = [p.name for p in (docs / "benchmarks" / "data").iterdir() if f"data/{p.name}" not in pages]
    assert uncited == []
