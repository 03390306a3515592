"""``pkb-ray``: one command for pkb_ray's entry points.

    pkb-ray sweep [group=option ...]         # python -m pkb_ray.sweep (Hydra; -m for a sweep)
    pkb-ray baselines [group=option ...]     # python -m pkb_ray.baselines
    pkb-ray report RUN [RUN ...] --out DIR   # one page over runs, results or multirun folders
    pkb-ray prompt problem=ID [backend=B ...] # what a model is asked for a problem
    pkb-ray cache clear|verify               # the reference cache
"""

from __future__ import annotations

import sys
from pathlib import Path

from pkb_ray.paths import CONF_DIR

CONF = CONF_DIR
EXAMPLES = """examples:
  pkb-ray sweep                                          # the shipped replay set, local Ray, gloo, W&B offline
  pkb-ray sweep problems=smoke eval.size=default
  pkb-ray sweep hardware=h200_2 eval=gpu ray=cluster     # 2 GPUs, NCCL, join a cluster
  pkb-ray sweep -m model=replay,kernels backend=cuda,all # a sweep: one job per combination
  pkb-ray sweep problems=pkb pkb.root=~/src/pkb model.samples=<folder of solutions_*>
  pkb-ray report multirun/<date>/<time> --out report/
  pkb-ray baselines hardware=h200_2 eval=gpu
  pkb-ray prompt problem=all_reduce backend=cuda
"""


def config_groups(conf: Path = CONF) -> dict[str, list[str]]:
    """Each Hydra config group and its options (``_base`` files are shared defaults, not options)."""
    return {d.name: sorted(f.stem for f in d.glob("*.yaml") if not f.stem.startswith("_"))
            for d in sorted(conf.iterdir()) if d.is_dir() and any(d.glob("*.yaml"))}


def usage() -> str:
    groups = "\n".join(f"  {g:10s} {', '.join(opts)}" for g, opts in config_groups().items())
    return f"{__doc__.strip()}\n\n{EXAMPLES}\nconfig groups (group=option; any key with key=value):\n{groups}\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command in ("sweep", "baselines"):
        if rest and rest[0] in ("-h", "--help"):
            print(usage())
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
    if command == "prompt":
        from pkb_ray.prompt import main as prompt

        return prompt(rest)
    if command == "cache":
        from pkb_ray.cache import main as cache

        return cache(rest)
    print(f"pkb-ray: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
