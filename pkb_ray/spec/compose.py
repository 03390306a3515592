"""conf/ as Hydra composes it, seen from outside a Hydra job: the groups and their options, the
command line's overrides checked before Hydra stops at the first bad one, composition for commands
that are not Hydra entry points (``pkb-ray ls``, ``prompt``), and the keys' reference for ``--help``.

Hydra stops at the first unknown group option or key; :func:`check_overrides` finds all of them
(with close matches), and :func:`compose_config` adds what pydantic finds in the rest, so one
message lists every mistake of a command line.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pkb_ray.spec.config import ConfigError, SweepConfig, check_config, config_errors, did_you_mean, key_docs, unknown_key
from pkb_ray.spec.paths import CONF_DIR

# Hydra's own flags that take no value: a command line of these and overrides is checked here
PLAIN_FLAGS = {"-m", "--multirun", "--resolve"}


def config_groups(conf: Path = CONF_DIR) -> dict[str, list[str]]:
    """Each Hydra config group and its options (``_base`` files are shared defaults, not options)."""
    return {d.name: sorted(f.stem for f in d.glob("*.yaml") if not f.stem.startswith("_"))
            for d in sorted(conf.iterdir()) if d.is_dir() and any(d.glob("*.yaml"))}


def _parse(overrides: Sequence[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(list(overrides))


def explicit_groups(overrides: Sequence[str]) -> set[str]:
    """The config groups that ``overrides`` (Hydra's ``overrides.task`` of a job) choose."""
    groups = config_groups()
    return {o.key_or_group for o in _parse(overrides) if o.key_or_group in groups and not o.is_delete()}


def _values(o: Any) -> list[str]:
    return list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]


def check_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """(errors, the overrides without them): group options that no file of conf/<group>/ holds and keys
    that name no config key, each with close matches. A ``+key`` adds a key: pydantic judges it."""
    groups, errors, kept = config_groups(), [], []
    for text, o in zip(overrides, _parse(overrides)):
        key = o.key_or_group
        found: list[str] = []
        if key.startswith("hydra") or "/" in key or o.is_delete():
            pass  # Hydra's own settings, groups of groups, deletions: Hydra's to judge
        elif key in groups:
            try:
                bad = [v for v in _values(o) if v not in groups[key]]
            except Exception:  # a sweep Hydra expands itself (range, glob): left to it
                bad = []
            found = [f"{key}={v}: no conf/{key}/{v}.yaml{did_you_mean(v, groups[key], f'{key}=')}; options: "
                     f"{', '.join(groups[key])}" for v in bad]
        elif not o.is_add() and (err := unknown_key(key)):
            found = [err]
        errors += found
        if not found:
            kept.append(text)
    return errors, kept


def _compose(overrides: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], set[str]]:
    """(the composed config, Hydra's group choices, the groups the overrides chose)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    given = {o.key_or_group for o in _parse(overrides)}
    extra = [] if "output_dir" in given else ["output_dir=."]  # ${hydra:runtime.output_dir} is a job's
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        raw = compose(config_name="config", overrides=[*extra, *overrides], return_hydra_config=True)
    choices = {k: v for k, v in raw.hydra.runtime.choices.items() if not k.startswith("hydra/")}
    with open_dict(raw):
        del raw["hydra"]
    return OmegaConf.to_container(raw, resolve=True), choices, explicit_groups(overrides)


def config_problems(overrides: Sequence[str]) -> tuple[SweepConfig | None, list[str]]:
    """(the config, None if any error; every error): of the overrides, then of the rest composed."""
    from hydra.errors import HydraException

    errors, kept = check_overrides(overrides)
    try:
        raw, choices, explicit = _compose(kept)
    except HydraException as exc:  # what check_overrides does not foresee (a malformed value)
        return None, [*errors, str(exc)]
    cfg, more = check_config(raw, choices, explicit)
    return (None if errors else cfg), [*errors, *more]


def compose_config(overrides: Sequence[str] = (), source: str = "config") -> SweepConfig:
    """conf/config.yaml with ``overrides``, validated; one ConfigError lists every mistake."""
    cfg, errors = config_problems(overrides)
    if errors:
        raise ConfigError(config_errors(errors, source))
    return cfg


def precheck(argv: Sequence[str]) -> str | None:
    """Every mistake of a Hydra entry point's command line (None: none found, Hydra takes over).
    Only a line of overrides and plain flags is checked; any other flag leaves it all to Hydra."""
    if any(a.startswith("-") and a not in PLAIN_FLAGS for a in argv):
        return None
    overrides = [a for a in argv if a not in PLAIN_FLAGS]
    errors, kept = check_overrides(overrides)
    if not errors:
        return None  # values are checked when the job validates its config, with the same messages
    if not any(o.is_sweep_override() for o in _parse(kept)):  # one job: what is wrong in the rest too
        errors = config_problems(overrides)[1]
    return config_errors(errors)


def keys_help(width: int = 100) -> str:
    """Every config key with its type, default (as the default groups compose it) and description."""
    from omegaconf import OmegaConf

    composed = OmegaConf.create(_compose([])[0])
    lines = ["config keys (key=value), defaults as the default groups compose them:"]
    for key, kind, default, description in key_docs():
        value = OmegaConf.select(composed, key, default=default)
        shown = "null" if value is None else str(OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
        lines.append(f"  {key}  ({kind}, default {shown})")
        if description:
            lines += textwrap.wrap(description, width, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def groups_help() -> str:
    return "\n".join(f"  {g:10s} {', '.join(opts)}" for g, opts in config_groups().items())
