"""What a sweep's terminal shows (issue 66): `python -m pkb_ray.sweep` in a real terminal (a pty) on
a tiny sample set, joined to the session's Ray cluster. No error-level line of Ray's in a clean
run, none of Ray's or Ray Data's own log lines (they are in the run's log file), the isolation level
in one short line (its long form in the log file), the counts of this run, and one progress bar
with the log's lines above it and an ETA only once a result has given a rate."""

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow

RAY_ERROR = re.compile(r"\[\S+ \S+ E \d+ \d+\]")  # glog's error lines: "[2026-12-07 18:12:06,337 E 2235 3249] ..."
RAY_DATA_INFO = ("Starting execution of Dataset", "Execution plan of Dataset", "execution finished in")
COLUMNS = 160


def run_in_a_terminal(cmd: list[str], cwd, env: dict, timeout_s: float = 600) -> tuple[int, str]:
    """``cmd`` with its stdout and stderr on a pty of COLUMNS columns; its exit code and all it wrote."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=child, stderr=child)
    os.close(child)
    out, deadline = bytearray(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # every writer closed the pty
                break
            out += data
        elif proc.poll() is not None:
            break
    if proc.poll() is None:
        proc.kill()
    os.close(main)
    return proc.wait(), out.decode(errors="replace")


def screen(raw: str) -> list[str]:
    """The lines a terminal ends up showing: a carriage return goes back to the line's start and what
    follows overwrites it; "erase to the end of the line" erases."""
    lines = []
    for row in raw.replace("\r\n", "\n").split("\n"):
        line, col = "", 0
        for part in re.split(r"(\r|\x1b\[[0-9;]*[A-Za-z])", row):
            if part == "\r":
                col = 0
            elif part.startswith("\x1b["):
                if part.endswith("K"):
                    line = line[:col]
            elif part:
                line = line[:col] + part + line[col + len(part):]
                col += len(part)
        lines.append(line.rstrip())
    return lines


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, shared_ray):
    tmp = tmp_path_factory.mktemp("terminal")
    samples = tmp / "samples" / "all_reduce"
    samples.mkdir(parents=True)
    for name in ("00_reference_copy.py", "03_average_not_sum.py", "08_cuda_nvcc_error.py"):  # two for the gang,
        # one built on a compile actor (a compile_error, with nvcc or without)
        (samples / name).write_text((REPO / "samples" / "replay" / "all_reduce" / name).read_text())
    run_dir = tmp / "run"
    cmd = [sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={run_dir}", f"model.samples={tmp / 'samples'}",
           "ray.include_dashboard=false", "eval.timeout_s=20", "eval.rounds=10",
           "wandb=disabled", f"cache_dir={tmp / 'cache'}", *shared_ray.overrides(2)]
    code, raw = run_in_a_terminal(cmd, tmp, shared_ray.env(dict(os.environ, RAY_DISABLE_USAGE_STATS="1")))
    return code, raw, screen(raw), (run_dir / "run.log").read_text()


def test_a_clean_run_shows_no_ray_error_and_no_ray_log_lines_which_the_log_file_holds(clean_run):
    code, raw, shown, log = clean_run
    assert code == 0, "\n".join(shown[-40:])
    assert not [line for line in shown if RAY_ERROR.search(line)], "\n".join(shown)
    assert not [line for line in shown if any(s in line for s in RAY_DATA_INFO)], "\n".join(shown)
    assert "Progress bars disabled" not in raw and "ray.data" not in raw
    # Ray Data's lines and the driver's own are in the run's log file
    assert all(s in log for s in RAY_DATA_INFO[:2]) and "[ray.data." in log
    assert "[2 evaluated, 3 results]" in log


def test_the_isolation_level_is_one_short_line_with_its_long_form_in_the_log_file(clean_run):
    _, _, shown, log = clean_run
    said = [line for line in shown if "isolation: " in line]
    assert len(said) == 1 and len(said[0]) < 200 and "namespaces" not in said[0], said
    assert "details: " in said[0] and said[0].endswith("run.log")
    assert "isolation: sandbox (" in log and "namespaces" in log  # Probe.describe(), in full


def test_the_counts_are_this_runs(clean_run, problems):
    """Every problem is chosen (problems=all) but the samples are of one: before, "3 samples of 61 problems"."""
    _, _, shown, _ = clean_run
    said = [m for line in shown if (m := re.search(r"(\d+) samples of (\d+) problems(.*) ->", line))]
    assert len(said) == 1 and said[0].groups()[:2] == ("3", "1"), "\n".join(shown)
    assert said[0][3] == f" ({len(problems) - 1} of the {len(problems)} problems chosen have no samples)"


def test_one_progress_bar_with_the_logs_lines_above_it_and_an_eta_only_from_a_measured_rate(clean_run):
    _, raw, shown, _ = clean_run
    bars = [line for line in shown if re.search(r"pkb_ray: +\d+%\|", line)]
    assert len(bars) == 1 and re.search(r"\| 3/3 results \[[\d:]+\]$", bars[0]), "\n".join(shown)  # no ETA left
    # every log line on a line of its own, above the bar: none written onto it
    assert not [line for line in shown if "%|" in line and "[pkb_ray" in line], "\n".join(shown)
    assert shown.index(bars[0]) > max(i for i, line in enumerate(shown) if "evaluated, 3 results]" in line)
    # the bar's ETA comes with the gang's first result, from its measured rate; before it, none at all
    drawn = [(m.start(), int(m[1]), bool(m[2])) for m in re.finditer(r"(\d)/3 results \[[\d:]+(, ETA [\d:]+)?\]", raw)]
    before = [d for d in drawn if d[0] < raw.index("[1 evaluated")]  # the bar drawn as that result came may have one
    assert before and before[0][1] == 0 and not any(eta for _, _, eta in before[:-1]), drawn
    assert any(eta for _, _, eta in drawn) and drawn[-1][1:] == (3, False), drawn
