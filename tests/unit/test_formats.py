"""The seam between the core and the benchmarks it imports (pkb_ray.spec.formats): the native format adds
nothing, an imported one is reached only through the registry, and no core module tests for one."""

import ast

import pandas as pd
import pytest

from conftest import REPO
from pkb_ray.pipeline.compile import needs_build
from pkb_ray.pipeline.selection import with_problems_folder
from pkb_ray.pipeline.validate import validate
from pkb_ray.spec import formats
from pkb_ray.spec.config import ConfigError, SweepConfig, validate_config
from pkb_ray.spec.schema import Sample
from pkb_ray.summary.tables import verdicts

BUILDS = "from torch.utils.cpp_extension import load_inline\nm = load_inline('x', '')\ndef solution(x):\n    return x\n"


def test_the_native_format_adds_nothing(tmp_path):
    native = formats.of({})
    assert native is formats.NATIVE and formats.of({"format": "no such format"}) is native
    assert not native.positional and not native.builds_extensions and native.verdict is None
    assert native.read(tmp_path, "m") is None and native.problems_folder(SweepConfig()) is None
    cfg = SweepConfig()
    assert with_problems_folder(cfg) is cfg


def test_a_problem_source_is_one_the_registry_knows():
    assert {"native", "pkb"} <= set(formats.names())
    with pytest.raises(ConfigError, match="problems.format"):
        validate_config({"problems": {"format": "nope"}})


def test_a_formats_hooks_decide_what_the_core_does(problems):
    row = {"problem_id": "all_reduce", "model": "m", "sample_index": 0, "backend": "cuda",
           "source": "def solution(a, b):\n    return a\n"}
    assert "must keep the reference's parameters" in validate(row, problems, 2).message
    fmt = formats.get("pkb")
    assert fmt.positional and fmt.builds_extensions
    positional = validate(dict(row, source="def solution(t):\n    return t\n", metadata={"format": "pkb"}), problems, 2)
    assert isinstance(positional, Sample)
    native = Sample(problem_id="all_reduce", model="m", sample_index=0, backend="cuda", source=BUILDS)
    assert not needs_build(native)  # a native sample's load_inline is built on its rank, as any import
    assert needs_build(native.model_copy(update={"metadata": {"format": "pkb"}}))


def test_the_second_verdict_fills_its_column_and_its_table():
    rule = formats.second_verdict()
    assert rule is not None and rule.column == "pkb_verdict"  # the Parquet column users read
    rows = pd.DataFrame({"model": ["m", "m"], "problem_id": ["a", "b"], "sample_index": [0, 0],
                         "status": ["correct", "wrong_output"], "message": ["", "dtype"],
                         rule.column: [True, True]})
    table = verdicts(rows)
    assert list(table["sample"]) == ["(all)", "b/0"] and table[rule.passes].iloc[0] == 2
    assert verdicts(rows.drop(columns=[rule.column])) is None


def test_a_format_brings_its_config_section_its_column_and_its_example():
    """The core's config, result schema and usage list what the formats declare, under their names."""
    from pkb_ray.cli import usage
    from pkb_ray.spec.schema import RESULT_SCHEMA, Result

    fmt = formats.get("pkb")
    assert isinstance(validate_config({"pkb": {"root": "/src/pkb"}}).pkb, fmt.settings)
    with pytest.raises(ConfigError, match=r"pkb\.rot"):  # a typo in the format's section names its key
        validate_config({"pkb": {"rot": "/src/pkb"}})
    column = fmt.verdict.column
    assert RESULT_SCHEMA.field(column).type == "bool" and Result.model_fields[column].default is None
    assert fmt.example and fmt.example in usage()
    assert set(formats.settings_sections()) == {"pkb"} and formats.verdict_columns() == [column]


def _strings_and_imports(path):
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield "string", node.value
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield "import", node.module
        elif isinstance(node, ast.Import):
            yield from (("import", a.name) for a in node.names)


def test_no_core_module_names_an_imported_benchmark():
    """Outside pkb_ray/pkb/ nothing imports it, tests for it or names its keys and column: the format
    brings them (:func:`test_a_format_brings_its_config_section_its_column_and_its_example`)."""
    own = {"pkb_problems.", "pkb_results", "pkb_eval_seconds", "pkb_compile_seconds", "pkb_queue_depth",
           "pkb_gangs", "pkb_gang_busy_fraction"}  # pkb_ray's own names: loaded problems' package, its metrics
    allowed = {"spec/formats.py": {"pkb"}, "problem.py": own, "pipeline/telemetry.py": own}
    found = []
    for path in sorted((REPO / "pkb_ray").rglob("*.py")):
        rel = path.relative_to(REPO / "pkb_ray")
        if rel.parts[0] == "pkb":
            continue
        for kind, value in _strings_and_imports(path):
            named = value.startswith("pkb_ray.pkb") if kind == "import" else \
                (value == "pkb" or value.startswith(("pkb_ray.pkb", "pkb_")) and not value.startswith("pkb_ray"))
            if named and value not in allowed.get(str(rel), set()):
                found.append(f"{rel}: {kind} {value!r}")
    assert found == []
