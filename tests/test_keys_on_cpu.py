"""API keys stay in the driver: a local Ray started by ``start_ray`` hands none to its tasks and
actors, lets Ray's own ``RAY_*`` settings through, and the driver keeps its keys."""

import os

import ray

from pkb_ray import cluster
from pkb_ray.config import SweepConfig

CANARIES = {"OPENAI_API_KEY": "sk-test-canary-openai", "WANDB_API_KEY": "wandb-canary-0123",
            "HF_TOKEN": "hf_canary_token", "DB_PASSWORD": "canary-password",
            "PKB_LLM_ACCESS": "canary-named-by-api-key-env"}  # no deny word: caught as model.api_key_env


def test_secret_names_on_a_plain_dict():
    env = {"OPENAI_API_KEY": "x", "github_token": "x", "AWS_SECRET_ACCESS_KEY": "x", "PKB_LLM_ACCESS": "x",
           "RAY_AUTH_TOKEN": "x", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "PATH": "/bin", "HOME": "/h"}
    assert cluster.secret_names(env, ["PKB_LLM_ACCESS", None]) == [
        "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "PKB_LLM_ACCESS", "github_token"]
    assert cluster.secret_names(env) == ["AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "github_token"]


@ray.remote(num_cpus=0)
def task_env() -> dict:
    return dict(os.environ)


@ray.remote(num_cpus=0)
class EnvActor:
    def env(self) -> dict:
        return dict(os.environ)


@ray.remote(num_cpus=0)
def warned_in_worker() -> list:
    return cluster.warn_secrets_in_job_env("PKB_LLM_ACCESS")


def leaked(env: dict) -> list[str]:
    return sorted(k for k, v in env.items() if any(c in v for c in CANARIES.values()))


def test_a_local_ray_starts_without_the_drivers_keys(monkeypatch, tmp_path):
    for k, v in CANARIES.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RAY_PKB_TEST_TOKEN", "ray-setting-passes")  # a deny word, but Ray's own prefix
    monkeypatch.setenv("PKB_TEST_PLAIN", "plain-passes")
    monkeypatch.setenv(cluster.NOSET_CUDA, "1")  # start_ray sets it; monkeypatch undoes it after
    cfg = SweepConfig.model_validate({"model": {"api_key_env": "PKB_LLM_ACCESS"}, "eval": {"isolation": "none"},
                                      "ray": {"num_cpus": 2, "include_dashboard": False},
                                      "cache_dir": str(tmp_path / "cache")})
    ray.shutdown()
    try:
        cluster.start_ray(cfg)
        assert {k: os.environ.get(k) for k in CANARIES} == CANARIES  # the driver keeps them
        actor = EnvActor.remote()
        envs = {"task": ray.get(task_env.remote()), "actor": ray.get(actor.env.remote())}
        for where, env in envs.items():
            assert leaked(env) == [] and not set(CANARIES) & set(env), where
            assert env.get("RAY_PKB_TEST_TOKEN") == "ray-setting-passes", where
            assert env.get("PKB_TEST_PLAIN") == "plain-passes", where
        # what a joined cluster's driver checks: secret-looking env_vars of a runtime env (here a task's)
        with_keys = warned_in_worker.options(runtime_env={"env_vars": {"OPENAI_API_KEY": "sk-x", "PKB_LLM_ACCESS": "y",
                                                                       "RAY_PKB_TOKEN": "z", "OMP": "1"}})
        assert ray.get(with_keys.remote()) == ["OPENAI_API_KEY", "PKB_LLM_ACCESS"]
        assert cluster.warn_secrets_in_job_env("PKB_LLM_ACCESS") == []  # this job sets none
    finally:
        ray.shutdown()
