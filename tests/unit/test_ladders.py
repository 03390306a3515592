"""Ladders (pkb_ray.problems.ladders): problems and candidates whose true speedup is known by
construction. The sources are rewritten, then run (on CPU tensors, no process group): a rung
does its work n times and returns what the original returns."""

import ast
import types

import pytest
import torch

from pkb_ray.problem import load_problem
from pkb_ray.problems.ladders import ONCE, POOL_SETS, ladder_problem, repeated_source, write_ladder

SOURCE = '''
"""A test problem."""
CALLS = []
META = dict(id="scale", name="Scale", world_sizes=dict(min=2))

def solution(x, factor=2.0, *rest, scale=1.0, **extra):
    CALLS.append(1)
    return x * factor * scale + len(rest) + len(extra)
'''


def _module(source: str) -> types.ModuleType:
    module = types.ModuleType("rung")
    exec(compile(source, "rung", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("times", [1, 2, 8])
def test_a_repeated_solution_does_the_work_n_times_and_returns_the_same(times):
    module = _module(repeated_source(SOURCE, times))
    x = torch.arange(4.0)
    out = module.solution(x, 3.0, 7, 8, scale=0.5, tag=1)
    assert torch.equal(out, _module(SOURCE).solution(x, 3.0, 7, 8, scale=0.5, tag=1))
    assert len(module.CALLS) == times
    assert hasattr(module, ONCE)
    # the repeats before the last ran on copies of their own (none in a cache from the call before)
    assert len(module._LADDER_POOL["sets"]) == (POOL_SETS if times > 1 else 0)
    assert module._LADDER_POOL["next"] == times - 1
    if times > 1:
        assert all(a[0] is not x and torch.equal(a[0], x) for a, _ in module._LADDER_POOL["sets"])


def test_repeated_source_refuses_what_it_cannot_repeat():
    with pytest.raises(ValueError, match="times must be at least 1"):
        repeated_source(SOURCE, 0)
    with pytest.raises(ValueError, match="no top-level 'def solution'"):
        repeated_source("META = dict(id='x')\n", 2)


def test_a_ladder_problem_has_its_own_id_and_world_sizes():
    new_id, text = ladder_problem(SOURCE, 4, min_world_size=1)
    assert new_id == "scale_x4"
    meta = _module(text).META
    assert meta["id"] == "scale_x4" and meta["world_sizes"] == {"min": 1} and meta["name"] == "Scale"
    with pytest.raises(ValueError, match="no top-level META"):
        ladder_problem("def solution(x):\n    return x\n", 2)


def test_written_ladder_problems_load_as_problems(tmp_path):
    from conftest import REPO

    source = (REPO / "problems/all_reduce.py").read_text()
    ids = write_ladder(source, tmp_path, [1, 4], min_world_size=1)
    assert ids == ["all_reduce_x1", "all_reduce_x4"]
    problem = load_problem(tmp_path / "all_reduce_x4.py")
    assert problem.id == "all_reduce_x4"
    tree = ast.parse((tmp_path / "all_reduce_x4.py").read_text())
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For)]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "_ladder_repeat"]
    assert len(loops) == 1 and len(calls) == 1 and ast.unparse(calls[0].args[1]) == "3"  # 3 repeats, then the call
