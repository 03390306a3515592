"""The benchmarks package: every module is a registered benchmark with a one-line description, each
shows its command and answers ``--help``, ``python -m benchmarks --list`` lists them, a run records
how it was made; and scripts/ keeps only the entry points, named correctly wherever they are cited."""

import ast
import json
import re
import subprocess
import sys

import pytest

from benchmarks import common, registry
from conftest import REPO

PACKAGE = REPO / "benchmarks"
NOT_BENCHMARKS = {"__init__", "__main__", "common", "registry"}  # the package's own machinery


def modules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py")} - NOT_BENCHMARKS


def test_every_module_is_registered_and_every_name_is_a_module():
    assert set(registry.names()) == modules()


@pytest.mark.parametrize("name", sorted(registry.names()))
def test_each_has_a_one_line_description_its_command_and_a_main(name):
    description = registry.names()[name]
    assert description.strip() and "\n" not in description and len(description) <= 120, description
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    assert f"-m benchmarks {name}" in (ast.get_docstring(tree) or ""), "its docstring shows how to run it"
    mains = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "main"]
    assert mains and [a.arg for a in mains[0].args.args] == ["argv"]


@pytest.mark.parametrize("name", sorted(registry.names()))
def test_each_imports_and_answers_help(name, capsys):
    assert registry.run(name, ["--help"]) == 0
    assert f"python -m benchmarks {name}" in capsys.readouterr().out


def test_list_runs_and_names_every_benchmark():
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--list"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    listed = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert listed == registry.names()


def test_an_unknown_name_exits_2_with_close_matches(capsys):
    assert registry.run("timing_nois", []) == 2
    assert "did you mean timing_noise" in capsys.readouterr().err


def test_a_run_records_its_command_and_commit(tmp_path):
    run = common.Run.of("benchmarks.timing_noise", ["--reps", "2", "--out", str(tmp_path / "x.json")])
    assert run.out(None).parent == common.DATA and run.out(None).name.startswith("timing_noise_")
    assert not any(common.DATA.glob("timing_noise_*")), "out() creates nothing"
    written = json.loads(run.write(tmp_path / "x.json", [{"speedup": 1.0}]).read_text())
    assert written["rows"] == [{"speedup": 1.0}]
    record = written["run"]
    assert record["command"] == f"python -m benchmarks timing_noise --reps 2 --out {tmp_path / 'x.json'}"
    assert record["argv"] == ["--reps", "2", "--out", str(tmp_path / "x.json")]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # a git checkout (a copied tree has no commit to record)
        assert record["commit"] == head.stdout.strip()


def test_scripts_keeps_only_the_entry_points():
    files = sorted(p.name for p in (REPO / "scripts").iterdir())
    assert len(files) <= 12, files


def test_every_script_or_benchmark_cited_exists():
    """A page, test, config, module or script that names scripts/X or ``-m benchmarks NAME`` names
    one that is there; a retired script only where a note within four lines says so."""
    cited = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs/benchmarks").glob("*.md")),
             *sorted((REPO / "tests").rglob("*.py")), *sorted((REPO / "tests").rglob("*.md")),
             *sorted((REPO / "conf").rglob("*.yaml")), *sorted((REPO / "scripts").iterdir()),
             *sorted((REPO / "pkb_ray").rglob("*.py")), *sorted(PACKAGE.rglob("*.py")), PACKAGE / "README.md",
             REPO / "kernels" / "README.md", REPO / ".ci" / "run"]
    missing = []
    for path in cited:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            for script in re.findall(r"(?<![\w/.])scripts/([\w.-]+\.(?:py|sh|yaml))", line):
                if not (REPO / "scripts" / script).exists() and "retired" not in " ".join(lines[max(0, n - 4):n + 1]).lower():
                    missing.append(f"{path.relative_to(REPO)}:{n + 1} scripts/{script}")
            missing += [f"{path.relative_to(REPO)}:{n + 1} benchmarks {name}"
                        for name in re.findall(r"-m benchmarks ([a-z_]+)", line) if name not in registry.names()]
    assert missing == []
