"""Every ``pkb-ray`` command in README.md and docs/ works as written, so the documentation cannot
drift from the code. A command that needs a cluster, GPUs or an API key is checked in its dry form:
its overrides compose into a valid config (what a sweep checks before it starts anything), its
flags are ones the command takes, the problem it names exists; ``help``, ``ls`` and ``prompt`` run.
Placeholders (``<folder of ...>``, ``outputs/<date>/<time>``) are left to the reader."""

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
MODULES = {"pkb_ray.sweep": ["sweep"], "pkb_ray.baselines": ["baselines"], "pkb_ray.generate.prompt": ["prompt"],
           "pkb_ray.cli": []}


def documented() -> list[tuple[str, list[str]]]:
    """(where, the command's arguments after ``pkb-ray``) of every documented command."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", page.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                try:
                    tokens = shlex.split(line, comments=True)
                except ValueError:  # a line that is not one command (a heredoc, an unbalanced quote)
                    continue
                tokens = [os.path.expandvars(t) for t in tokens]  # as the shell would ($HOME)
                if tokens and Path(tokens[0]).name == "pkb-ray":
                    args = tokens[1:]
                elif len(tokens) > 2 and tokens[0] in ("python", "python3") and tokens[1] == "-m" \
                        and tokens[2] in MODULES:
                    args = MODULES[tokens[2]] + tokens[3:]
                else:
                    continue
                found.append((f"{page.relative_to(REPO)}: {line.strip()}", args))
    return found


COMMANDS = documented()


def test_the_pages_document_commands():
    said = {args[0] if args else "" for _, args in COMMANDS}
    assert {"sweep", "serve", "report", "compare", "ls", "prompt", "submit"} <= said, said


def _placeholder(text: str) -> bool:
    return "<" in text or "..." in text


SWITCHES = {"-m", "--multirun", "--no-wait", "--allow-local-results"}  # flags that take no value


def _overrides(rest: list[str]) -> list[str]:
    """The overrides among a command's arguments: not flags, nor the values of flags."""
    out, skip = [], False
    for arg in rest:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg not in SWITCHES and "=" not in arg
        elif "=" in arg and not _placeholder(arg.split("=", 1)[1]):
            out.append(arg)
    return out


def _run(main, argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's --help
            code = exc.code or 0
    return code, out.getvalue()


@pytest.mark.parametrize("where, args", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_documented_command_works_as_written(where, args):
    from pkb_ray.cli import main as cli

    command, rest = (args[0], args[1:]) if args else ("", [])
    if command in ("", "help", "--help", "-h", "ls", "prompt"):
        if command == "prompt":  # needs only a problem and a config: it runs
            assert any(a.startswith("problem=") for a in rest), where
        code, said = _run(cli, args)
        assert code == 0, f"{where}\n{said[-2000:]}"
        return
    if command in ("sweep", "serve", "baselines"):
        from pkb_ray.spec.compose import config_problems

        errors = config_problems(_overrides(rest))[1]
        assert errors == [], f"{where}: {errors}"
        return
    # report, compare, submit: every flag is one the command takes (its --help lists them)
    code, said = _run(cli, [command, "--help"])
    assert code == 0, f"{where}: {command} --help failed\n{said[-1000:]}"
    flags = [a.split("=", 1)[0] for a in rest if a.startswith("--")]
    assert all(flag in said for flag in flags), f"{where}: flags {flags} against\n{said}"
    if command == "submit":
        from pkb_ray.spec.compose import config_problems

        assert config_problems(_overrides(rest))[1] == [], where
