"""A verdict as the service answers it: the sweep's result row, the reward, and feedback a model can
act on in its next turn.

It also says whether the sample is the problem's reference handed back (``reference_copy``): the
prompt shows the reference, so a copy is correct and times at ~1x. That is decided here, on the
service's side, from the problems folder the service judges with (a client cannot claim or deny
it), by comparing normalised syntax trees (:func:`fingerprint`).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pkb_ray.generate.prompt import feedback
from pkb_ray.serve.reward import reward
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.paths import PROBLEMS_DIR
from pkb_ray.spec.schema import Result

FEEDBACK_SLOW_BELOW = 1.0  # a correct sample is told to beat the reference


@lru_cache(maxsize=1)
def evaluator_version() -> str:
    """pkb_ray's version and a digest of its code: a verdict is reused only by the code that gave it."""
    from pkb_ray import __version__

    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:12]}"


def config_digest(cfg: SweepConfig) -> str:
    """What else decides a verdict: the eval settings and the hardware profile (with the code's version)."""
    text = json.dumps([evaluator_version(), cfg.eval.model_dump(mode="json"), cfg.hardware.model_dump(mode="json"),
                       cfg.problems_dir], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def answer(result: Result, cfg: SweepConfig, cached: bool) -> dict[str, Any]:
    """The response body of one verdict (docs/serve.md#the-answer)."""
    correct = result.status == Status.CORRECT
    speedup = result.speedup if correct else None
    interval = [result.speedup_lo, result.speedup_hi] if correct and result.speedup_lo is not None else None
    copy = is_reference_copy(result.source, cfg.problems_dir, result.problem_id)
    return {
        "status": result.status.value, "correct": correct, "speedup": speedup, "speedup_interval": interval,
        "reward": reward(correct, speedup, cfg.serve.reward, copy), "reference_copy": copy,
        "feedback": served_feedback(result, cfg, copy),
        "eval_seconds": result.eval_seconds, "cached": cached,
        "sol_fraction": result.sol_fraction if correct else None,
        "ref_time_us": result.ref_time_us, "cand_time_us": result.cand_time_us,
        "timing_mode": result.timing_mode or None,
        "message": result.message, "failed_rank": result.failed_rank,
        "problem_id": result.problem_id, "backend": result.backend, "world_size": result.world_size,
        "size": result.size, "dtype": result.dtype, "hardware": result.hardware,
        "sample_key": result.sample_key, "evaluator_version": evaluator_version(),
    }


def served_feedback(result: Result, cfg: SweepConfig, copy: bool = False) -> str:
    """The refinement round's feedback (pkb_ray.generate.prompt.feedback: trimmed errors, the first mismatch
    with its rank, index, values and max abs error), with the speedup's interval where there is one."""
    row = result.model_dump(mode="json")
    text = feedback(row, cfg, FEEDBACK_SLOW_BELOW)
    if result.status == Status.CORRECT and result.speedup_lo is not None:
        text += (f"\n\nThe speedup's 95% interval over the timed rounds: [{result.speedup_lo:.2f}, "
                 f"{result.speedup_hi:.2f}].")
    if copy and result.status == Status.CORRECT:
        text += ("\n\nThis solution is the reference implementation itself (the same code up to names, comments "
                 "and formatting): it earns no reward. Write your own implementation that is faster.")
    return text


# ---- copies of the reference ----

def is_reference_copy(source: str, problems_dir: str | None, problem_id: str) -> bool:
    """Whether ``source`` is the reference of ``problem_id`` (in ``problems_dir``, None: the default
    folder) up to names, comments, docstrings, annotations and formatting."""
    theirs = fingerprint(source)
    return theirs is not None and theirs == _reference_fingerprint(str(problems_dir or PROBLEMS_DIR), problem_id)


@lru_cache(maxsize=512)
def _reference_fingerprint(problems_dir: str, problem_id: str) -> str | None:
    # a problem's file is <id>.py (pkb_ray.problem.load_problem refuses any other name)
    try:
        return fingerprint((Path(problems_dir) / f"{problem_id}.py").read_text())
    except OSError:
        return None


def fingerprint(source: str) -> str | None:
    """What ``solution`` computes, as text: the normalised tree of ``solution`` and of every module-level
    function, class or constant it reaches (in the order it reaches them), then the module's other
    statements that run at import (side effects). None where the source does not parse or defines no
    ``solution`` function.

    Normalised: docstrings, bare strings, annotations and imports go (an imported name becomes its
    full dotted path, so ``import torch.distributed as d; d.all_reduce`` is
    ``torch.distributed.all_reduce``); each reached definition is named by its reach order, each
    local name by its first appearance in its definition. Attribute, keyword and builtin names,
    constants and the order of statements stay: changing any of them is changing the code.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    aliases = _imports(tree)
    defined: dict[str, ast.stmt] = {}  # module-level name -> its last binding statement (the one that holds)
    effects: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) or _is_bare_string(stmt) or _is_main_guard(stmt):
            continue
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[stmt.name] = stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and _plain_targets(stmt):
            for name in _plain_targets(stmt):
                defined[name] = stmt
        else:
            effects.append(stmt)
    root = defined.get("solution")
    if not isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    reached: dict[str, str] = {}  # module-level name -> its canonical name, in reach order
    order: list[ast.stmt] = []

    def reach(name: str) -> str:
        if name not in reached:
            reached[name] = f"g{len(reached)}"
            if defined[name] not in order:
                order.append(defined[name])
        return reached[name]

    reach("solution")
    parts: list[str] = []

    def walk() -> None:  # reaching a definition may reach others: dump until none is new
        while len(parts) < len(order):
            parts.append(ast.dump(_Canon(aliases, defined, reach).top(order[len(parts)])))

    walk()
    side = [ast.dump(_Canon(aliases, defined, reach).top(stmt)) for stmt in effects]
    walk()
    return "\n".join(parts + side)


def _imports(tree: ast.Module) -> dict[str, str]:
    """Every imported name (anywhere in the module) -> the dotted path it stands for."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:  # import a.b.c binds a; import a.b.c as x binds x to a.b.c
                found[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for a in node.names:
                found[a.asname or a.name] = f"{base}.{a.name}" if base else a.name
    return found


def _is_bare_string(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _is_main_guard(stmt: ast.stmt) -> bool:
    """``if __name__ == "__main__":``, which does not run when the module is imported."""
    test = stmt.test if isinstance(stmt, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _plain_targets(stmt: ast.Assign | ast.AnnAssign) -> list[str]:
    """The names a module-level assignment binds, or [] if it assigns anything else (an attribute, an item)."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
        return []
    names = []
    for target in targets:
        if not isinstance(target, ast.Name):
            return []
        names.append(target.id)
    return names


MODULE = "@"  # marks a name that stands for an import's dotted path (attributes fold into it)


class _Canon(ast.NodeTransformer):
    """Rewrites one module-level statement into its normalised form (see :func:`fingerprint`)."""

    def __init__(self, aliases: dict[str, str], defined: dict[str, ast.stmt], reach):
        self.aliases, self.defined, self.reach = aliases, defined, reach
        self.local: set[str] = set()
        self.names: dict[str, str] = {}
        self.in_class = False

    def top(self, stmt: ast.stmt) -> ast.AST:
        stmt = copy.deepcopy(stmt)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # every name bound inside the definition is its own (nested scopes share it: closures read it)
            self.local = {n for node in ast.walk(stmt) for n in _bound(node)} - {stmt.name}
        return self.visit(stmt)

    def _name(self, name: str) -> str:
        if name in self.local:
            return self.names.setdefault(name, f"v{len(self.names)}")
        if name in self.defined:
            return self.reach(name)
        if name in self.aliases:
            return MODULE + self.aliases[name]
        return name  # a builtin or an unknown global: as written

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """A definition's statements, normalised, without docstrings, bare strings and imports."""
        kept = [self.visit(s) for s in body
                if not _is_bare_string(s) and not isinstance(s, (ast.Import, ast.ImportFrom))]
        return [s for s in kept if s is not None] or [ast.Pass()]

    def _definition(self, node, in_class: bool):
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        if hasattr(node, "type_params"):  # Python 3.12's generics: annotations too
            node.type_params = []
        was, self.in_class = self.in_class, in_class
        node.body = self._body(node.body)
        self.in_class = was
        return node

    def visit_FunctionDef(self, node):
        if not self.in_class:  # a method's name is an attribute: it stays
            node.name = self._name(node.name)
        node.returns = None
        node.type_comment = None
        node.args = self.visit(node.args)
        return self._definition(node, in_class=False)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        node.name = self._name(node.name)
        node.bases = [self.visit(b) for b in node.bases]
        node.keywords = [self.visit(k) for k in node.keywords]
        return self._definition(node, in_class=True)

    def visit_arg(self, node):
        node.arg = self._name(node.arg)
        node.annotation = None
        node.type_comment = None
        return node

    def visit_AnnAssign(self, node):
        if node.value is None:  # a bare annotation does nothing
            return None
        return ast.copy_location(self.visit(ast.Assign(targets=[node.target], value=node.value)), node)

    def visit_Expr(self, node):
        return None if _is_bare_string(node) else self.generic_visit(node)

    def visit_Name(self, node):
        node.id = self._name(node.id)
        return node

    def visit_Attribute(self, node):
        node = self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id.startswith(MODULE):  # dist.x -> @torch.distributed.x
            return ast.copy_location(ast.Name(id=f"{node.value.id}.{node.attr}", ctx=node.ctx), node)
        return node

    def visit_Global(self, node):
        node.names = [self._name(n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node):
        node.name = self._name(node.name) if node.name else None
        return self.generic_visit(node)

    def visit_alias(self, node):
        return node

    def visit_MatchAs(self, node):
        node.name = self._name(node.name) if node.name else None
        return self.generic_visit(node)

    def visit_MatchStar(self, node):
        node.name = self._name(node.name) if node.name else None
        return node


def _bound(node: ast.AST) -> list[str]:
    """The names ``node`` binds in its scope."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return []  # imports resolve to their dotted paths wherever they are
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    return []
