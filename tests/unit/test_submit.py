"""``pkb-ray submit``: what it sends as a Ray Job (entrypoint, runtime env), and what it refuses to send;
how it follows a job (against a real job server: tests/test_submit_job.py)."""

import io
import shlex
import subprocess
from types import SimpleNamespace

import pytest
from pathspec import PathSpec

from pkb_ray.cli import main as cli
from pkb_ray.cli import submit as submit_command
from pkb_ray.commands.submit import SubmitArgs, auth_headers, excludes, first_job, follow, job_spec
from pkb_ray.spec.compose import compose_config
from pkb_ray.spec.config import ConfigError
from pkb_ray.spec.paths import CODE_ROOT

BUCKET = "results_dir=s3://bucket/runs/x"
OPENAI = ["model=gpt_5"]  # a generating model; its key: OPENAI_API_KEY


def spec(*argv: str, environ=None):
    with submit_command.make_context("submit", list(argv)) as ctx:  # pkb-ray submit's own parsing
        args = SubmitArgs(**ctx.params)
    return job_spec(args, compose_config(first_job(args.overrides)), environ or {})


def test_a_replay_sweep_with_results_in_a_bucket_joins_the_cluster_with_no_env_vars():
    s = spec("problems=smoke", BUCKET, "wandb=disabled")
    assert shlex.split(s.entrypoint) == ["python", "-m", "pkb_ray.sweep", "problems=smoke", BUCKET, "wandb=disabled",
                                         "ray=cluster"]
    assert s.runtime_env["working_dir"] == str(CODE_ROOT) and ".venv" in s.runtime_env["excludes"]
    assert "env_vars" not in s.runtime_env and s.notes == []
    # W&B's offline files would stay in the job's temporary copy: said; options anywhere on the line
    assert "wandb=offline: the W&B run's files stay" in spec("problems=smoke", BUCKET).notes[0]
    s = spec("problems=smoke", "--python", "/opt/env/bin/python", BUCKET, "--no-wait")
    assert s.entrypoint.startswith("/opt/env/bin/python -m pkb_ray.sweep problems=smoke")
    # a sweep: its first job is checked here, the whole line goes to the cluster; a ray choice is the user's
    s = spec("-m", "problems=smoke,all", BUCKET, "ray.address=10.0.0.1:6379")
    assert shlex.split(s.entrypoint)[3:] == ["-m", "problems=smoke,all", BUCKET, "ray.address=10.0.0.1:6379"]


@pytest.mark.parametrize("argv, key", [((), "results_dir"), (("results_dir=/tmp/r",), "results_dir"),
                                       (("results_dir=file:///tmp/r",), "results_dir"),
                                       ((BUCKET, *OPENAI), "generated_dir")])
def test_a_folder_of_the_jobs_temporary_working_dir_is_refused_unless_allowed(argv, key):
    with pytest.raises(ConfigError, match=f"{key}: .* temporary copy on the head node; give durable storage"):
        spec(*argv)
    assert spec("--allow-local-results", *argv).entrypoint.startswith("python -m pkb_ray.sweep")


def test_the_api_key_reaches_the_driver_only_as_asked():
    both = (BUCKET, "generated_dir=s3://bucket/gen", *OPENAI)
    # a file on the head node, read by the entrypoint: nothing of the key in what Ray is sent
    s = spec("--key-file", "~/.pkb_ray/openai key", *both, environ={"OPENAI_API_KEY": "sk-secret"})
    assert s.entrypoint.startswith('OPENAI_API_KEY="$(cat "$HOME"/\'.pkb_ray/openai key\')" python -m pkb_ray.sweep')
    assert "sk-secret" not in repr(s) and "env_vars" not in s.runtime_env
    out = subprocess.run(["bash", "-c", s.entrypoint.split(" python ")[0] + ' printenv OPENAI_API_KEY'],
                         env={"HOME": "/nonexistent"}, capture_output=True, text=True)
    assert "/nonexistent/.pkb_ray/openai key" in out.stderr  # the shell reads the file the user named
    # through the runtime env: only when named, and said what it costs
    s = spec("--pass-env", "OPENAI_API_KEY", *both, environ={"OPENAI_API_KEY": "sk-secret"})
    assert s.runtime_env["env_vars"] == {"OPENAI_API_KEY": "sk-secret"} and "every worker" in s.notes[0]
    with pytest.raises(ConfigError, match="--pass-env OPENAI_API_KEY: not set here"):
        spec("--pass-env", "OPENAI_API_KEY", *both)
    # neither: submitted (the head node may have it), with a note that the job needs it
    assert "neither by --key-file nor --pass-env" in spec(*both, environ={"OPENAI_API_KEY": "x"}).notes[0]


def test_a_bad_command_line_fails_before_anything_is_sent(capsys):
    assert cli(["submit", "eval.timout_s=3", BUCKET, "--address", "http://127.0.0.1:1"]) == 2
    assert "did you mean eval.timeout_s" in capsys.readouterr().err
    assert cli(["submit", "--address", "http://127.0.0.1:1"]) == 2  # local results: refused before connecting
    assert "results_dir: <output_dir>/results is a folder of the job's working dir" in capsys.readouterr().err
    assert cli(["submit", "--follow", "raysubmit_x", "problems=smoke"]) == 2  # a job has its own overrides
    assert "takes no overrides" in capsys.readouterr().err
    assert cli(["submit", BUCKET, "wandb=disabled", "--address", "http://127.0.0.1:1"]) == 2  # nothing listens there
    assert "no Ray job server at http://127.0.0.1:1" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")  # Ray's matcher, as Ray calls it
def test_what_git_tracks_is_shipped_and_what_it_ignores_is_not():
    # Ray reads .gitignore without git's exception for tracked files: the checkout's `wandb/` line
    # dropped conf/wandb/ and every job failed composing its config; git says what is ignored instead
    match = PathSpec.from_lines("gitwildmatch", excludes(CODE_ROOT)).match_file  # as Ray matches them
    tracked = subprocess.run(["git", "-C", str(CODE_ROOT), "ls-files"], capture_output=True, text=True).stdout.split()
    assert "conf/wandb/offline.yaml" in tracked and not [f for f in tracked if match(f)]
    assert all(map(match, [".venv/bin/python", ".git/HEAD", "pkb_ray/__pycache__/x.pyc"]))
    assert match("outputs/2026-12-03/x/report.html") == (CODE_ROOT / "outputs").exists()  # ignored where present
    not_git = PathSpec.from_lines("gitwildmatch", excludes(CODE_ROOT / "nonexistent")).match_file
    assert not_git("wandb/run-1/x") and not not_git("conf/wandb/offline.yaml")


def test_a_token_goes_only_to_a_job_server_on_this_machine_unless_asked(tmp_path):
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t0\n")
    home = {"HOME": str(tmp_path)}
    assert auth_headers("http://127.0.0.1:8265", home) == {"Authorization": "Bearer t0"}  # ray start's, here
    assert auth_headers("http://localhost:8265", {**home, "RAY_AUTH_TOKEN": "t1"}) == {"Authorization": "Bearer t1"}
    (tmp_path / "tok").write_text("t2")
    assert auth_headers("http://[::1]:8265", {**home, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "tok")}) == {
        "Authorization": "Bearer t2"}
    assert auth_headers("http://10.0.0.1:8265", home) == {}  # another machine: only as Ray's own clients are told
    assert auth_headers("http://127.0.0.1:8265", {**home, "RAY_AUTH_MODE": "token"}) == {}  # Ray's client adds it
    assert auth_headers("http://127.0.0.1:8265", {"HOME": str(tmp_path / "none")}) == {}


class _JobServer:
    """What ``follow`` asks of Ray's JobSubmissionClient, played from a script: each connection's
    chunks (from the log's start, as Ray's tail sends them), then an exception or a normal end."""

    def __init__(self, connections, statuses, message=""):
        self.connections, self.statuses, self.message = list(connections), list(statuses), message

    async def tail_job_logs(self, job_id):
        chunks, end = self.connections.pop(0)
        for chunk in chunks:
            yield chunk
        if end:
            raise end

    def get_job_status(self, job_id):
        return SimpleNamespace(value=self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0])

    def get_job_info(self, job_id):
        return SimpleNamespace(message=self.message)


def test_following_picks_a_dropped_stream_up_where_it_stopped_and_exits_as_the_job_ends(capsys):
    out = io.StringIO()
    server = _JobServer([(["a\n", "b\n"], RuntimeError("WebSocket connection closed unexpectedly")),
                         (["a\nb\n", "c\n"], None)], ["RUNNING", "SUCCEEDED"])
    assert follow(server, "j", out=out, wait_s=0) == 0
    assert out.getvalue() == "a\nb\nc\n" and "following again" in capsys.readouterr().err
    server = _JobServer([(["x\nNo module named 'pandas'\n"], None)], ["FAILED"],
                        "Job entrypoint command failed with exit code 1, last available logs (truncated): ...")
    assert follow(server, "j", out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert "job j: FAILED: Job entrypoint command failed with exit code 1\n" in err and "hint: the head node" in err
    # a server that keeps dropping with nothing new: given up, saying how to follow again
    server = _JobServer([([], OSError("refused"))] * 3, ["RUNNING"])
    assert follow(server, "j", out=io.StringIO(), retries=2, wait_s=0, again="pkb-ray submit --follow j") == 1
    assert "pkb-ray submit --follow j follows it" in capsys.readouterr().err
