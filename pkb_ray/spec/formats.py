"""Sources of problems and formats of samples: the one seam between the core and a benchmark it imports.

A :class:`SampleFormat` says what its samples and problems need of the core's steps; the core asks
the format named by a sample's ``metadata["format"]`` (or by ``problems.format``) and never tests
for one by name. The native format (pkb_ray's problem files, replay folders, JSONL, Parquet) is
:data:`NATIVE` and adds nothing; each imported benchmark is a subpackage of pkb_ray with a
``format`` module whose ``FORMAT`` is its SampleFormat, named after the subpackage and loaded on
first use (this module imports none of them and names none: :func:`_registry` finds them). The
config and the result schema ask for every format's section and column when they are imported, so a
format module stays light (no torch at its top). Hooks and their callers:

- :meth:`SampleFormat.read` (``samples.read_samples``): a folder of this format as sample rows;
- :meth:`SampleFormat.annotate` (``samples.read_samples``): notes on rows that need the problems;
- :meth:`SampleFormat.problems_folder` (``selection.with_problems_folder``): where the problem files
  of a ``problems.format`` are (written at start), from the config;
- :meth:`SampleFormat.unknown_problem` (``stages.validate``): why a row's problem is missing;
- :attr:`SampleFormat.positional` (``stages.validate``): ``solution`` is called positionally, so
  only the number of its parameters must match the reference's;
- :attr:`SampleFormat.builds_extensions` (``stages.compile.needs_build``, ``harness``): its samples
  build torch extensions with ``load_inline``; the compile stage builds them ahead and the rank's
  trial step gets ``eval.inline_build_timeout_s`` more;
- :attr:`SampleFormat.verdict` (``runner.clean``, ``harness``, ``summary``): a second rule on the
  same outputs, recorded beside pkb_ray's status (:func:`second_verdict`), in a result column of
  its own (``schema``: :func:`verdict_columns`);
- :attr:`SampleFormat.settings` (``config``): the format's config section, a pydantic model under
  the format's name (:func:`settings_sections`);
- :attr:`SampleFormat.example` (``cli``): a line of the command's usage examples.

Pure: no Ray, no processes.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable

NATIVE_NAME = "native"
PACKAGE = Path(__file__).resolve().parent.parent  # pkb_ray/: a subpackage with a format.py is a format


@dataclass(frozen=True)
class SecondVerdict:
    """Another benchmark's own rule on the same outputs (first trial only), recorded beside the status."""

    column: str  # the result's field and Parquet column it fills
    agrees: Callable[[Any, Any], bool]  # (expected outputs, actual outputs) -> passes by that rule
    title: str  # the report's section heading
    note: str  # the note under it
    passes: str  # the report table's column: how many samples the rule passes


class SampleFormat:
    """What a format adds to the core's steps; these defaults are the native format's (nothing)."""

    name = NATIVE_NAME
    positional = False
    builds_extensions = False
    verdict: SecondVerdict | None = None
    settings: type | None = None  # a pydantic model: the config section named after the format
    example = ""  # e.g. "pkb-ray sweep problems=<it> ...": shown among the command's examples

    def read(self, path: Path, model: str) -> list[dict[str, Any]] | None:
        """Sample rows if ``path`` is a folder of this format, else None."""
        return None

    def annotate(self, rows: list[dict[str, Any]], problems: dict[str, Any]) -> None:
        """Note in the rows' metadata what only the loaded problems tell (in place)."""

    def problems_folder(self, cfg: Any) -> Path | None:
        """The folder of this source's problem files for ``cfg`` (None: ``problems_dir`` as given)."""
        return None

    def unknown_problem(self, sample: Any) -> str:
        """Why a sample's problem is missing, where this format knows more than "unknown" ("" if not)."""
        return ""


NATIVE = SampleFormat()
_loaded: dict[str, SampleFormat] = {}


@cache
def _registry() -> tuple[str, ...]:
    """The native format, then each subpackage of pkb_ray that has a ``format`` module, by name."""
    found = (p.parent.name for p in PACKAGE.glob("*/format.py") if (p.parent / "__init__.py").is_file())
    return (NATIVE_NAME, *sorted(found))


def names() -> list[str]:
    return list(_registry())


def get(name: str) -> SampleFormat:
    """The format called ``name``; an unknown name is the native format (its rows are validated as such)."""
    if name == NATIVE_NAME or name not in _registry():
        return NATIVE
    if name not in _loaded:
        _loaded[name] = importlib.import_module(f"pkb_ray.{name}.format").FORMAT
    return _loaded[name]


def of(metadata: dict[str, Any] | None) -> SampleFormat:
    """The format of a sample, from its metadata's ``format`` (native if none)."""
    return get(str((metadata or {}).get("format", NATIVE_NAME)))


def every() -> list[SampleFormat]:
    return [get(n) for n in _registry()]


def settings_sections() -> dict[str, type]:
    """Each format's config section (name -> pydantic model), for the sweep's config."""
    return {f.name: f.settings for f in every() if f.settings is not None}


def verdict_columns() -> list[str]:
    """The result columns the formats' second rules fill (booleans)."""
    return [f.verdict.column for f in every() if f.verdict is not None]


def examples() -> list[str]:
    return [f.example for f in every() if f.example]


def second_verdict() -> SecondVerdict | None:
    """The second rule every result records (the first registered format's that has one)."""
    return next((f.verdict for f in every() if f.verdict is not None), None)
