"""API keys stay in the driver: a local Ray started by ``start_ray`` hands none to its tasks and
actors, lets Ray's own ``RAY_*`` settings through, and the driver keeps its keys. The local Ray is
the session's (tests/shared_ray.py), started with the keys below in its driver's environment; a node
that joins it is started the same way."""

import os

import ray

from pkb_ray.pipeline import cluster
from shared_ray import CANARIES, PASSING


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


def test_a_local_ray_starts_without_the_drivers_keys(shared_ray):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    assert shared_ray.info["driver_kept_keys"]  # start_ray took them out for Ray's processes only
    with shared_ray.joined():
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        assert len(nodes) == 2
        envs = {}
        for i, node in enumerate(nodes):  # on the head and on the node that joined it
            on = NodeAffinitySchedulingStrategy(node, soft=False)
            actor = EnvActor.options(scheduling_strategy=on).remote()
            envs[f"task {i}"] = ray.get(task_env.options(scheduling_strategy=on).remote())
            envs[f"actor {i}"] = ray.get(actor.env.remote())
        for where, env in envs.items():
            assert leaked(env) == [] and not set(CANARIES) & set(env), where
            assert {k: env.get(k) for k in PASSING} == PASSING, where
        # what a joined cluster's driver checks: secret-looking env_vars of a runtime env (here a task's)
        with_keys = warned_in_worker.options(runtime_env={"env_vars": {"OPENAI_API_KEY": "sk-x", "PKB_LLM_ACCESS": "y",
                                                                       "RAY_PKB_TOKEN": "z", "OMP": "1"}})
        assert ray.get(with_keys.remote()) == ["OPENAI_API_KEY", "PKB_LLM_ACCESS"]
        assert cluster.warn_secrets_in_job_env("PKB_LLM_ACCESS") == []  # this job sets none
