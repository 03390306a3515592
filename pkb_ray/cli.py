"""``pkb-ray``: one command for pkb_ray's entry points.

    pkb-ray sweep [group=option ...]         # python -m pkb_ray.sweep (Hydra; -m for a sweep)
    pkb-ray baselines [group=option ...]     # python -m pkb_ray.baselines
    pkb-ray report RUN [RUN ...] --out DIR   # one page over runs, results or multirun folders
    pkb-ray serve [group=option ...]         # the reward service for RL trainers (docs/serve.md)
    pkb-ray submit [--address URL] [group=option ...] # a sweep as a Ray Job; results on s3:// etc.
    pkb-ray compare A B [--out DIR] [--alpha 0.05] # B against A, with intervals; exit 1 on a regression
    pkb-ray prompt problem=ID [backend=B ...] # what a model is asked for a problem
    pkb-ray ls [problems [--category C] | groups] # what a run would see (same overrides as a sweep)
    pkb-ray help config                      # every config key: type, default, description
"""

from __future__ import annotations

import sys

from pkb_ray.spec import formats
from pkb_ray.spec.compose import config_groups, groups_help, keys_help

EXAMPLES = """examples:
  pkb-ray sweep                                          # the shipped replay set, local Ray, gloo, W&B offline
  pkb-ray sweep problems=smoke eval.size=default
  pkb-ray sweep hardware=h200_2 ray=cluster              # 2 GPUs, NCCL (eval follows: gpu), join a cluster
  pkb-ray sweep problems=smoke model.limit_per_problem=1 # a partial run: one sample per problem
  pkb-ray sweep -m model=replay,kernels backend=cuda,all # a sweep: one job per combination
  pkb-ray serve                                          # http://127.0.0.1:8000/v1/verify, on the embedded default
  pkb-ray report multirun/<date>/<time> --out report/
  pkb-ray submit --key-file '~/.pkb_ray/openai_key' hardware=h200_8 results_dir=s3://bucket/runs/x
  pkb-ray compare outputs/<old run> outputs/<new run> --out compare/
  pkb-ray baselines hardware=h200_2
  pkb-ray prompt problem=all_reduce backend=cuda
  pkb-ray ls problems problems=smoke
"""


__all__ = ["config_groups", "main", "usage"]  # config_groups: for callers of the old home


def usage() -> str:
    imported = "".join(f"  {line}\n" for line in formats.examples())  # a line per imported benchmark
    return (f"{__doc__.strip()}\n\n{EXAMPLES}{imported}\nconfig groups (group=option; any key with key=value: "
            f"pkb-ray help config):\n{groups_help()}\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["help", "config"]:
        print(keys_help())
        return 0
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command in ("sweep", "baselines"):
        if rest and rest[0] in ("-h", "--help"):
            print(f"{usage()}\n{keys_help()}")
            return 0
        sys.argv = [f"pkb-ray {command}", *rest]  # Hydra reads sys.argv
        if command == "sweep":
            from pkb_ray.sweep import main as run
        else:
            from pkb_ray.baselines import main as run
        run()
        return 0
    if command == "report":
        from pkb_ray.summary.cli import main as report

        return report(rest)
    if command == "serve":
        from pkb_ray.serve.main import main as serve

        return serve(rest)
    if command == "submit":
        from pkb_ray.commands.submit import main as submit

        return submit(rest)
    if command == "compare":
        from pkb_ray.summary.cli import compare_main

        return compare_main(rest)
    if command == "prompt":
        from pkb_ray.generate.prompt import main as prompt

        return prompt(rest)
    if command == "ls":
        from pkb_ray.commands.listing import main as listing

        return listing(rest)
    print(f"pkb-ray: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
