"""A timed region's side is spelt by pkb_ray.spec.names.Side only, as test_layers.py holds the rank
sets' roles to Role: "ref" and "cand" as literals in several modules drift (issue 66 found the
last two in pkb_ray/evaluate/figures.py)."""

import ast

from conftest import REPO


def test_timed_sides_are_named_by_the_side_enum_only():
    spelt = []
    for path in sorted((REPO / "pkb_ray").rglob("*.py")):
        if path == REPO / "pkb_ray" / "spec" / "names.py":
            continue
        tree = ast.parse(path.read_text())
        prose = {id(n) for f in ast.walk(tree) if isinstance(f, ast.JoinedStr) for n in ast.walk(f)}
        spelt += [f"{path.relative_to(REPO)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in ("ref", "cand") and id(node) not in prose]
    assert spelt == []
