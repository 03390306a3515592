"""``pkb-ray submit``: what it sends as a Ray Job (entrypoint, runtime env), and what it refuses to send."""

import shlex
import subprocess

import pytest

from pkb_ray.compose import compose_config
from pkb_ray.config import ConfigError
from pkb_ray.paths import CODE_ROOT
from pkb_ray.submit import first_job, job_spec, main, parser

BUCKET = "results_dir=s3://bucket/runs/x"
OPENAI = ["model=gpt_5"]  # a generating model; its key: OPENAI_API_KEY


def spec(*argv: str, environ=None):
    args = parser().parse_args(list(argv))
    return job_spec(args, compose_config(first_job(args.overrides)), environ or {})


def test_a_replay_sweep_with_results_in_a_bucket_joins_the_cluster_with_no_env_vars():
    s = spec("problems=smoke", BUCKET)
    assert shlex.split(s.entrypoint) == ["python", "-m", "pkb_ray.sweep", "problems=smoke", BUCKET, "ray=cluster"]
    assert s.runtime_env["working_dir"] == str(CODE_ROOT) and ".venv" in s.runtime_env["excludes"]
    assert "env_vars" not in s.runtime_env and s.notes == []
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
    assert main(["eval.timout_s=3", BUCKET, "--address", "http://127.0.0.1:1"]) == 2
    assert "did you mean eval.timeout_s" in capsys.readouterr().err
    assert main(["--address", "http://127.0.0.1:1"]) == 2  # local results: refused before connecting
    assert "results_dir: <output_dir>/results is a folder of the job's working dir" in capsys.readouterr().err
