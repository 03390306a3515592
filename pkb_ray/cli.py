"""``pkb-ray``: one command over pkb_ray's entry points, a Click group in front of Hydra.

Every command's arguments are declared here, with its help (plain text, with examples), but for
``report`` and ``compare``, whose Click commands live beside their code (:mod:`pkb_ray.summary.cli`,
which ``scripts/report.py`` runs too) and load when named. Config overrides (``group=option``,
``key=value``) are one Click type (:class:`Override`); ``sweep`` and ``baselines`` hand their
arguments to Hydra unchanged (``-m`` and Hydra's own flags included). Every name a user types is
checked with close matches: a command, a benchmark, a problem id (``prompt``), a category
(``ls problems``), a config key or group option (:func:`pkb_ray.spec.compose.precheck` and
:func:`~pkb_ray.spec.compose.compose_config`, which every command that takes overrides goes through).
Exit codes: 2 for a usage error or a bad config; otherwise the command's own.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import click

from pkb_ray.spec import formats
from pkb_ray.spec.compose import PLAIN_FLAGS, config_groups, groups_help, keys_help

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
  pkb-ray bench --list                                   # the benchmarks (benchmarks/README.md)
"""

__all__ = ["config_groups", "main", "usage"]  # config_groups: for callers of the old home

SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
# Hydra's command line as typed: options Click does not know (-m, --cfg job, --hydra-help) stay in it
HYDRA_LINE = {**SETTINGS, "ignore_unknown_options": True, "allow_extra_args": True}
GROUPS_NOTE = "config groups (group=option; any key with key=value: pkb-ray help config):"


def suggest(word: str, known) -> str:
    """'; did you mean X?' for the close matches of ``word`` among ``known`` ('' for none)."""
    close = difflib.get_close_matches(word, list(known), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


# ------------------------------------------------------------------------------------------------
# the pieces every command is made of


class Override(click.ParamType):
    """A config override as Hydra takes it: ``group=option``, ``key=value``, ``+key=value``, ``~key``.
    A bare word is refused, with the group it is an option of (``smoke``: ``problems=smoke``).
    Keys and options are checked where the config is composed, every mistake at once."""

    name = "override"

    def convert(self, value, param, ctx):
        key = value.split("=", 1)[0].lstrip("+~")
        if key and ("=" in value or value.startswith("~")):
            return value
        groups = config_groups()
        options = {o for opts in groups.values() for o in opts}
        close = [value] if value in options else difflib.get_close_matches(value, options, n=2, cutoff=0.6)
        named = [f"{g}={o}" for o in close for g, opts in groups.items() if o in opts]
        hint = f"; did you mean {' or '.join(named)}?" if named else ""
        raise click.UsageError(f"{value!r} is not an override (group=option or key=value){hint}", ctx)


OVERRIDE = Override()


def hydra_line(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    """A Hydra entry point's arguments, unchanged. Where they are overrides and plain flags only
    (``-m``), each override's form is checked as :class:`Override` does; any other flag
    (``--cfg job``, which takes a value) leaves the line to Hydra."""
    if all(v in PLAIN_FLAGS or not v.startswith("-") for v in values):
        for v in values:
            if v not in PLAIN_FLAGS:
                OVERRIDE.convert(v, param, ctx)
    return list(values)


UNBROKEN = "\x00"  # a hyphen while text is wrapped: lines do not break inside --allow-local-results


class Formatter(click.HelpFormatter):
    """Click's help formatter, but a line never breaks at a hyphen (a flag's name stays whole)."""

    def write_text(self, text: str) -> None:
        super().write_text(text.replace("-", UNBROKEN))

    def write_dl(self, rows, *args, **kwargs) -> None:
        super().write_dl([(a, b.replace("-", UNBROKEN)) for a, b in rows], *args, **kwargs)

    def getvalue(self) -> str:
        return super().getvalue().replace(UNBROKEN, "-")


class Context(click.Context):
    formatter_class = Formatter


class More:
    """A command whose help ends with text printed as written (tables, the config's keys), made
    only when help is asked for (``more``)."""

    context_class = Context
    more: Callable[[], str] | None = None

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        if self.more is not None:
            formatter.write("\n" + self.more().rstrip("\n") + "\n")


class Command(More, click.Command):
    def __init__(self, *args, more: Callable[[], str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.more = more


class Group(More, click.Group):
    """Commands listed in :data:`ORDER`; ``lazy`` ones (name -> module, attribute, short help) are
    imported when named. An unknown command is a usage error with close matches."""

    command_class = Command

    def __init__(self, *args, lazy: dict[str, tuple[str, str, str]] | None = None,
                 more: Callable[[], str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy, self.more = lazy or {}, more

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = [*self.commands, *(n for n in self.lazy if n not in self.commands)]
        return sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.lazy:
            module, attr, _ = self.lazy[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return self.commands.get(name)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0]
        if not name.startswith("-") and self.get_command(ctx, name) is None:
            known = self.list_commands(ctx)
            hint = suggest(name, known) or f"; commands: {', '.join(known)}"
            raise click.UsageError(f"no such command {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        width = formatter.width - 6 - max(map(len, names))
        rows = [(n, self.lazy[n][2] if n in self.lazy and n not in self.commands
                 else self.commands[n].get_short_help_str(width)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _top_epilog() -> str:
    imported = "".join(f"  {line}\n" for line in formats.examples())  # a line per imported benchmark
    return f"{EXAMPLES}{imported}\n{GROUPS_NOTE}\n{groups_help()}\n"


def _groups() -> str:
    return f"{GROUPS_NOTE}\n{groups_help()}\n"


def _groups_and_keys() -> str:
    return f"{_groups()}\n{keys_help()}\n"


# ------------------------------------------------------------------------------------------------
# the group

ORDER = ("sweep", "baselines", "report", "compare", "serve", "submit", "prompt", "ls", "bench", "help")
LAZY = {
    "report": ("pkb_ray.summary.cli", "report_command",
               "One report (HTML and Markdown) over finished runs."),
    "compare": ("pkb_ray.summary.cli", "compare_command",
                "Run B against run A, with intervals; exit 1 on a regression."),
}


@click.group(cls=Group, context_settings=SETTINGS, invoke_without_command=True, lazy=LAZY, more=_top_epilog)
@click.pass_context
def pkb(ctx: click.Context) -> None:
    """pkb_ray evaluates LLM-written multi-GPU kernels on Ray: every sample compiled, checked on
    every rank and timed against the PyTorch + NCCL reference.

    `pkb-ray COMMAND --help` says what a command takes, with examples.
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def usage() -> str:
    """The top-level help, as ``pkb-ray --help`` prints it."""
    with Context(pkb, info_name="pkb-ray") as ctx:
        return pkb.get_help(ctx)


def _hydra_job(name: str, args: list[str]) -> int:
    """Run a Hydra entry point on ``args`` as if typed after ``python -m pkb_ray.<name>``."""
    sys.argv = [f"pkb-ray {name}", *args]  # Hydra reads sys.argv
    if name == "sweep":
        from pkb_ray.sweep import main as run
    else:
        from pkb_ray.baselines import main as run
    run()
    return 0


@pkb.command(context_settings=HYDRA_LINE, more=_groups_and_keys,
             short_help="Evaluate samples: one run, or a sweep of runs with -m.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, callback=hydra_line,
                metavar="[-m] [GROUP=OPTION | KEY=VALUE]...")
def sweep(args: list[str]) -> int:
    """Evaluate samples (python -m pkb_ray.sweep): compose conf/config.yaml with the overrides,
    evaluate every sample on Ray, print the summary table and write the run folder
    (outputs/<date>/<time>/: results, report.html, summary.json).

    The arguments go to Hydra as typed: group=option picks conf/<group>/<option>.yaml, key=value
    sets one key, -m runs one job per combination of comma-separated values, and Hydra's own flags
    (--cfg job, --hydra-help) pass through. Every unknown key or group option and every bad value
    is listed at once before anything starts, each with its close matches.

    \b
    Examples:
      pkb-ray sweep                                          # the shipped replay set, local Ray, gloo
      pkb-ray sweep problems=smoke eval.size=default
      pkb-ray sweep hardware=h200_2 ray=cluster              # 2 GPUs, NCCL, join a cluster
      pkb-ray sweep problems=smoke model.limit_per_problem=1 # one sample per problem
      pkb-ray sweep -m model=replay,kernels backend=cuda,all # one job per combination
      pkb-ray sweep results_dir=outputs/x/results            # resume a run cut short
    """
    return _hydra_job("sweep", args)


@pkb.command(context_settings=HYDRA_LINE, more=_groups_and_keys,
             short_help="Time each problem's reference on a hardware profile.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, callback=hydra_line,
                metavar="[-m] [GROUP=OPTION | KEY=VALUE]...")
def baselines(args: list[str]) -> int:
    """Time each problem's PyTorch + NCCL reference on this machine (python -m pkb_ray.baselines),
    with the sweep's timing protocol, and save the table to <baselines_dir>/<hardware.name>.json
    (docs/judging.md, Baselines). The arguments are a sweep's, passed to Hydra as typed.

    \b
    Examples:
      pkb-ray baselines hardware=h200_2                      # every problem, on 2 GPUs
      pkb-ray baselines problems=smoke eval.size=small       # on CPU (gloo): a check
    """
    return _hydra_job("baselines", args)


@pkb.command(more=_groups, short_help="The reward service for RL trainers (HTTP).")
@click.argument("overrides", nargs=-1, type=OVERRIDE, metavar="[GROUP=OPTION | KEY=VALUE]...")
def serve(overrides: tuple[str, ...]) -> int:
    """Start the reward service, print where it listens and serve until Ctrl-C (docs/serve.md).

    The config is composed as a sweep's (hardware, eval, problems, ray=local|cluster) plus its
    serve section (serve.host, serve.port, serve.dir, serve.token_file, ...: pkb-ray help config).
    Ray is started or joined as a sweep does it, then Ray Serve runs the service on
    serve.host:serve.port; the API documentation is at /docs.

    Bound to anything but loopback, every request must carry a bearer token (serve.token_file,
    else the variable serve.token_env names); without one the command refuses to start. It also
    refuses, with exit status 2, a port something listens on already and a Ray cluster that runs a
    pkb_ray service already.

    \b
    Examples:
      pkb-ray serve                                   # http://127.0.0.1:8000, the embedded default
      pkb-ray serve hardware=h200_2 serve.port=8100   # on 2 GPUs
      pkb-ray serve ray=cluster serve.host=0.0.0.0 serve.token_file=~/.pkb_ray/token
    """
    from pkb_ray.serve.main import main as run

    return run(list(overrides))


@pkb.command(short_help="Run a sweep as a Ray Job on a cluster.")
@click.option("--address", default="http://127.0.0.1:8265", envvar="RAY_ADDRESS", show_envvar=True,
              show_default=True, help="The cluster's job server (the head's dashboard port).")
@click.option("--working-dir", type=click.Path(path_type=Path), help="Shipped to the cluster (default: this checkout).")
@click.option("--python", default="python", show_default=True,
              help="The head node's interpreter with pkb_ray's dependencies (found on its PATH).")
@click.option("--key-file", multiple=True, metavar="[NAME=]PATH",
              help="Set NAME (default: model.api_key_env) from a file on the head node, in the job's driver only.")
@click.option("--pass-env", multiple=True, metavar="NAME",
              help="Pass this variable through the job's runtime_env: every worker of the job gets it.")
@click.option("--allow-local-results", is_flag=True,
              help="Let results_dir (or generated_dir) be a folder of the job's temporary working dir.")
@click.option("--no-wait", is_flag=True, help="Submit and return (--follow ID follows it).")
@click.option("--follow", metavar="ID", help="Follow a job submitted before: its logs from the start; "
                                             "the exit status is its status. Takes no overrides.")
@click.option("-m", "--multirun", is_flag=True, help="Hydra's -m: a job per combination.")
@click.argument("overrides", nargs=-1, type=OVERRIDE, metavar="[GROUP=OPTION | KEY=VALUE]...")
def submit(**params) -> int:
    """Submit a sweep as a Ray Job to a running cluster and stream its logs until it ends
    (docs/cluster.md). The command line is checked here first, every mistake at once; ray=cluster
    is added unless a ray choice is given, and this checkout is shipped as the job's working dir.

    The job runs in a temporary copy of the checkout on the head node, so results_dir must be
    durable storage (s3://bucket/prefix, gs://..., hdfs://...), and generated_dir too for a
    generating model, unless --allow-local-results. The report is copied beside the results
    (<results_dir>/_report/). API keys reach the job only as asked: --key-file reads a file on the
    head node into the driver alone (recommended); --pass-env puts your value in the job's
    runtime_env, which every worker gets and the job API shows.

    A cluster that asks for a token: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or
    RAY_AUTH_TOKEN_PATH) to what `ray get-auth-token` prints on the head node.

    Exit status: 0 the job succeeded; 1 it failed or was stopped; 2 nothing was submitted or
    followed; 130 Ctrl-C (the job goes on).

    \b
    Examples:
      pkb-ray submit hardware=h200_8 results_dir=s3://my-bucket/pkb/2026-12-03
      pkb-ray submit --key-file '~/.pkb_ray/openai_key' model=gpt_5 results_dir=s3://b/x generated_dir=s3://b/g
      pkb-ray submit --no-wait -m eval.size=small,default results_dir=s3://b/y
      pkb-ray submit --follow raysubmit_XXXX
    """
    from pkb_ray.commands.submit import SubmitArgs
    from pkb_ray.commands.submit import main as run

    return run(SubmitArgs(**params))


@pkb.command(more=_groups, short_help="Print what a model is asked for a problem.")
@click.argument("overrides", nargs=-1, type=OVERRIDE, metavar="problem=ID [GROUP=OPTION | KEY=VALUE]...")
def prompt(overrides: tuple[str, ...]) -> int:
    """Print the system and user messages a model is asked for one problem (docs/models.md):
    the rules, the hardware, the reference source, the backend's notes and a worked example.
    problem=ID names the problem (pkb-ray ls problems lists them); backend=, hardware= and the
    rest are a sweep's overrides.

    \b
    Examples:
      pkb-ray prompt problem=all_reduce
      pkb-ray prompt problem=all_to_all backend=cuda hardware=h200_2
    """
    if not any(o.startswith("problem=") for o in overrides):
        raise click.UsageError("name the problem: problem=ID (pkb-ray ls problems lists them)")
    from pkb_ray.generate.prompt import main as run

    return run(list(overrides))


@pkb.group(cls=Group, invoke_without_command=True, short_help="List what a run would see: problems, config groups.")
@click.pass_context
def ls(ctx: click.Context) -> None:
    """List what a run would see, before running it."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@ls.command("problems", more=_groups, short_help="Problems: id, category, world sizes, dtypes, sizes, speed of light.")
@click.option("--category", "categories", multiple=True, metavar="C",
              help="Only problems of this category (repeatable).")
@click.argument("overrides", nargs=-1, type=OVERRIDE, metavar="[GROUP=OPTION | KEY=VALUE]...")
def ls_problems(categories: tuple[str, ...], overrides: tuple[str, ...]) -> int:
    """The problems a run would see, from the sweep's own loader and overrides (problems=smoke,
    problems_dir=..., eval.size=...): per problem its id, category, world sizes, dtypes, size
    presets, the size eval.size gives and its speed of light.

    \b
    Examples:
      pkb-ray ls problems
      pkb-ray ls problems problems=smoke eval.size=default
      pkb-ray ls problems --category moe hardware=h200_2
    """
    from pkb_ray.commands.listing import problems

    return problems(list(categories), list(overrides))


@ls.command("groups", short_help="The config groups (group=option) and their options.")
def ls_groups() -> int:
    """The config groups (group=option) and their options."""
    click.echo(groups_help())
    return 0


@pkb.command(short_help="Run a benchmark by name (--list lists them).",
             context_settings={**SETTINGS, "ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--list", "listing", is_flag=True, help="List the benchmarks with what each measures.")
@click.argument("name", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(listing: bool, name: str | None, args: tuple[str, ...]) -> int:
    """Run one of the benchmarks (benchmarks/, in a checkout) with its own arguments; each writes
    JSON under docs/benchmarks/data (or --out) and the pages of docs/benchmarks/ quote it.
    Everything after NAME is the benchmark's: `pkb-ray bench NAME --help` is its help.

    \b
    Examples:
      pkb-ray bench --list
      pkb-ray bench kernels --help
    """
    try:
        from benchmarks import registry
    except ImportError as exc:
        raise click.ClickException(f"the benchmarks are not importable here ({exc}): they live in a checkout's "
                                   "benchmarks/ folder (not in the wheel); run pkb-ray from that checkout") from None
    table = registry.names()
    if listing:
        width = max(map(len, table))
        click.echo("\n".join(f"{n:{width}}  {text}" for n, text in table.items()))
        return 0
    if name is None:
        raise click.UsageError("name a benchmark (pkb-ray bench --list lists them)")
    if name not in table:
        raise click.UsageError(f"no benchmark {name!r}{suggest(name, table)} (pkb-ray bench --list lists them)")
    return registry.run(name, list(args))


@pkb.command("help", short_help="Help on a command, or on every config key (help config).")
@click.argument("topic", required=False, metavar="[config | COMMAND]")
@click.pass_context
def help_(ctx: click.Context, topic: str | None) -> int:
    """Help on a command (as COMMAND --help), or every config key with its type, default and
    description (help config).

    \b
    Examples:
      pkb-ray help config
      pkb-ray help sweep
    """
    parent = ctx.parent
    if topic is None:
        click.echo(parent.get_help())
    elif topic == "config":
        click.echo(keys_help())
    else:
        command = pkb.get_command(parent, topic)
        if command is None:
            known = ["config", *pkb.list_commands(parent)]
            raise click.UsageError(f"no help on {topic!r}{suggest(topic, known) or '; topics: ' + ', '.join(known)}")
        with command.make_context(topic, [], parent=parent, resilient_parsing=True) as sub:
            click.echo(command.get_help(sub))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``pkb-ray``: the command's exit status (2 for a usage error; 130 on Ctrl-C)."""
    try:
        code = pkb.main(args=argv, prog_name="pkb-ray", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:  # Ctrl-C
        return 130
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
