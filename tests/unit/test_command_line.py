"""``pkb-ray`` as one Click command line (issue 66): plain-text help for every command, a close
match wherever a command, problem, key, option, category or benchmark is misspelled, overrides
handed to Hydra as typed, and the exit codes the commands promise (2 for a usage error)."""

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from conftest import REPO
from pkb_ray.cli import LAZY, main, pkb

MARKUP = re.compile(r"``|:(mod|class|func|meth|data|attr):")


def _paths(group: click.Group, ctx: click.Context, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command of ``group`` as the words that name it (``("ls", "problems")``)."""
    out = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        out.append((*prefix, name))
        if isinstance(command, click.Group):
            with click.Context(command, info_name=name, parent=ctx) as sub:
                out += _paths(command, sub, (*prefix, name))
    return out


with click.Context(pkb, info_name="pkb-ray") as _ctx:
    COMMANDS = _paths(pkb, _ctx)


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    said = capsys.readouterr()
    return code, said.out, said.err


def test_every_command_is_listed():
    names = {p[0] for p in COMMANDS}
    assert {"sweep", "baselines", "report", "compare", "serve", "submit", "prompt", "ls", "bench", "help"} <= names
    assert ("ls", "problems") in COMMANDS and ("ls", "groups") in COMMANDS
    for name, (_, _, short) in LAZY.items():  # what --help lists without importing them is their own
        with click.Context(pkb, info_name="pkb-ray") as ctx:
            assert pkb.get_command(ctx, name).short_help == short


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_every_commands_help_is_plain_text(words, capsys):
    code, out, err = _cli([*words, "--help"], capsys)
    assert code == 0 and err == ""
    assert out.startswith(f"Usage: pkb-ray {' '.join(words)}"), out[:200]
    assert not MARKUP.search(out), MARKUP.search(out).group(0)
    if words[0] not in ("help", "ls") or words == ("ls", "problems"):
        assert "Examples:" in out  # each command shows how it is used
    assert "-h, --help" in out


def test_the_top_help_lists_the_commands_examples_and_config_groups(capsys):
    code, out, _ = _cli(["--help"], capsys)
    assert code == 0 and not MARKUP.search(out)
    commands = out.split("Commands:")[1].split("examples:")[0]
    assert [line.split()[0] for line in commands.strip().splitlines()][:3] == ["sweep", "baselines", "report"]
    assert "pkb-ray compare outputs/<old run> outputs/<new run> --out compare/" in out  # the examples, as before
    assert "  hardware   cpu_gloo" in out
    assert _cli([], capsys)[1] == out  # no command: the same help, exit 0


def test_help_takes_a_command_or_config(capsys):
    assert _cli(["help", "report"], capsys)[1].startswith("Usage: pkb-ray report [OPTIONS] RUN...")
    code, out, _ = _cli(["help", "config"], capsys)
    assert code == 0 and "  eval.trials  (int, default 3)" in out
    code, _, err = _cli(["help", "confg"], capsys)
    assert code == 2 and "did you mean config?" in err


def test_an_unknown_command_suggests_the_nearest(capsys):
    code, out, err = _cli(["swep", "problems=smoke"], capsys)
    assert code == 2 and out == "" and "no such command 'swep'; did you mean sweep?" in err
    code, _, err = _cli(["ls", "problms"], capsys)
    assert code == 2 and "did you mean problems?" in err


def test_an_unknown_problem_suggests_the_nearest_not_every_id(capsys):
    code, out, err = _cli(["prompt", "problem=all_reduse"], capsys)
    assert code == 2 and out == ""
    assert "unknown id 'all_reduse'; did you mean all_reduce" in err
    assert "all_to_all" not in err and "broadcast" not in err  # not the list of every problem
    code, _, err = _cli(["prompt", "backend=cuda"], capsys)
    assert code == 2 and "name the problem: problem=ID" in err


def test_a_misspelled_key_option_or_model_gets_a_close_match_in_every_command(capsys):
    code, _, err = _cli(["prompt", "problem=all_reduce", "model=gtp_5", "backnd=cuda"], capsys)
    assert code == 2 and "did you mean model=gpt_5?" in err and "did you mean backend?" in err
    code, _, err = _cli(["ls", "problems", "eval.timout_s=3"], capsys)
    assert code == 2 and "did you mean eval.timeout_s" in err
    code, _, err = _cli(["serve", "eval.timout_s=3", "serve.prot=9"], capsys)  # before Ray or a port is touched
    assert code == 2 and err.startswith("pkb-ray serve: config: 2 errors")
    assert "did you mean eval.timeout_s" in err and "did you mean serve.port" in err
    code, _, err = _cli(["ls", "problems", "--category", "gem"], capsys)
    assert code == 2 and "did you mean --category gemm?" in err
    code, _, err = _cli(["report", "--ot", "x", "somewhere"], capsys)  # Click's own, for an option
    assert code == 2 and "--out" in err


def test_a_bare_word_is_no_override_and_the_group_it_belongs_to_is_named(capsys):
    code, _, err = _cli(["ls", "problems", "smoke"], capsys)
    assert code == 2 and "'smoke' is not an override (group=option or key=value); did you mean problems=smoke?" in err
    code, _, err = _cli(["sweep", "smok"], capsys)
    assert code == 2 and "did you mean problems=smoke?" in err


def test_a_sweeps_misspelled_key_is_found_before_hydra_starts(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pkb-ray"])  # the command sets Hydra's sys.argv
    with pytest.raises(SystemExit) as stop:
        main(["sweep", "-m", "problems=smoke,smok", "eval.timout_s=5"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: config: 2 errors"), err
    assert "problems=smok: no conf/problems/smok.yaml; did you mean problems=smoke" in err
    assert "did you mean eval.timeout_s" in err and sys.argv[0] == "pkb-ray sweep"


def _pkb_ray() -> list[str]:
    """The installed command (the console script), else the module."""
    script = Path(sys.executable).parent / "pkb-ray"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "pkb_ray.cli"]


def test_a_sweeps_arguments_reach_hydra_as_typed(tmp_path):
    done = subprocess.run([*_pkb_ray(), "sweep", "--cfg", "job", "problems=smoke", "eval.size=default",
                           "hardware.world_sizes=[2,4]", "+extra_note=hello"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    job = done.stdout  # Hydra's composed config: every override applied, the run not started
    assert "size: default" in job and "extra_note: hello" in job and re.search(r"world_sizes:\n\s*- 2\n\s*- 4", job)
    assert not (tmp_path / "outputs").exists()


def test_compare_and_report_refuse_bad_input_with_exit_2(capsys, tmp_path):
    code, _, err = _cli(["compare", str(tmp_path), str(tmp_path), "--alpha", "1.5"], capsys)
    assert code == 2 and "--alpha" in err
    assert _cli(["report"], capsys)[0] == 2  # no run named
    code, _, err = _cli(["report", str(tmp_path / "nowhere")], capsys)
    assert code == 2 and "nowhere: no such folder" in err


def test_bench_lists_and_runs_the_registry(capsys):
    registry = pytest.importorskip("benchmarks.registry", reason="the benchmarks package is not importable here")
    code, out, _ = _cli(["bench", "--list"], capsys)
    names = registry.names()
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == list(names)
    assert "kernels" in names
    code, _, err = _cli(["bench", "kernls"], capsys)
    assert code == 2 and "did you mean kernels?" in err
    assert _cli(["bench"], capsys)[0] == 2
    code, out, _ = _cli(["bench", "kernels", "--help"], capsys)  # everything after NAME is the benchmark's
    assert code == 0 and "kernels" in out and not out.startswith("Usage: pkb-ray bench")

