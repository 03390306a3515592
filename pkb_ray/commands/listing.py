"""``pkb-ray ls problems``: the problems a run would see, listed before running it (the command
line is pkb_ray/cli.py's).

Problems come from the loader a sweep uses (:func:`pkb_ray.pipeline.selection.job_inputs`), so
``problems=smoke``, ``problems_dir=...``, ``problems.categories=[...]`` and ``eval.size=...`` mean
what they mean in a sweep.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pkb_ray.pipeline.selection import job_inputs
from pkb_ray.problem import Problem, ProblemError, WorldSizes, sol_time_us
from pkb_ray.spec.compose import compose_config
from pkb_ray.spec.config import ConfigError, SweepConfig, did_you_mean

COLUMNS = ("id", "category", "W", "dtypes", "sizes", "size (eval.size)", "SOL us")


def world_sizes(ws: WorldSizes) -> str:
    """``2-8``, ``2+`` (no maximum), with ``, x2`` when W must be a multiple of 2."""
    span = f"{ws.min}-{ws.max}" if ws.max is not None else f"{ws.min}+"
    return span + (f", x{ws.multiple_of}" if ws.multiple_of > 1 else "")


def speed_of_light(p: Problem, cfg: SweepConfig, knobs: dict[str, int]) -> str:
    """The bound in microseconds at the run's size, first world size the problem supports (said
    after it), dtype and hardware profile; '-' where the problem has no model of it (or none at
    that size)."""
    sizes = [lay.world_size for lay in cfg.hardware.layouts]
    w = next((x for x in sizes if p.meta.world_sizes.supports(x)), None)
    if w is None or not hasattr(p.module, "speed_of_light"):
        return "-"
    dtype = cfg.eval.dtype or p.meta.dtypes[0]
    try:
        return f"{sol_time_us(p, knobs, w, dtype, cfg.hardware):.3g}, W={w}"
    except Exception:  # a model that does not hold at this size: shown as none, not a failed listing
        return "-"


def problem_rows(cfg: SweepConfig, problems: dict[str, Problem]) -> list[tuple[str, ...]]:
    """One row of :data:`COLUMNS` per problem, in id order."""
    rows = []
    for pid in sorted(problems):
        p = problems[pid]
        _, knobs = p.size(cfg.eval.size)
        named = "standard" if tuple(p.meta.sizes) == STANDARD_SIZES else ", ".join(p.meta.sizes)
        presets = named + (f", ladder {len(p.meta.ladder)}" if p.meta.ladder else "")
        dtypes = ", ".join(SHORT_DTYPES.get(d, d) for d in p.meta.dtypes)
        rows.append((pid, p.meta.category, world_sizes(p.meta.world_sizes), dtypes, presets,
                     ", ".join(f"{k}={v}" for k, v in knobs.items()), speed_of_light(p, cfg, knobs)))
    return rows


WIDTH = 100  # the listing fits a terminal of this many columns: long cells wrap at their commas
STANDARD_SIZES = ("small", "default", "large")  # shown as "standard"
SHORT_DTYPES = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def table(rows: list[tuple[str, ...]], columns: tuple[str, ...] = COLUMNS, width: int = WIDTH) -> str:
    """Columns side by side within ``width``: the widest cells wrap (at ", ") onto lines of their own
    until the table fits."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    floor = [max(len(c), *(_longest_part(r[i]) for r in rows)) for i, c in enumerate(columns)]
    while sum(widths) + 2 * (len(widths) - 1) > width:
        shrinkable = [j for j in range(len(widths)) if widths[j] > floor[j]]
        if not shrinkable:
            break  # nothing wraps further
        i = max(shrinkable, key=lambda j: widths[j])  # the widest column gives first
        widths[i] -= 1
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(columns), line(["-" * w for w in widths])]
    for row in rows:
        cells = [_wrap(cell, w) for cell, w in zip(row, widths)]
        out += [line([c[k] if k < len(c) else "" for c in cells]) for k in range(max(map(len, cells)))]
    return "\n".join(out)


def _longest_part(cell: str) -> int:
    """The narrowest a cell can be wrapped to: its longest part (with the comma that ends it)."""
    parts = cell.split(", ")
    return max(len(p) + (i < len(parts) - 1) for i, p in enumerate(parts))


def _wrap(cell: str, width: int) -> list[str]:
    """``cell`` in lines of at most ``width`` (broken after its commas; a part longer stays whole)."""
    parts = cell.split(", ")
    lines, current = [], ""
    for i, part in enumerate(parts):
        joined = f"{current}, {part}" if current else part
        if current and len(joined) + (i < len(parts) - 1) > width:  # a comma ends it unless last
            lines.append(current + ",")
            current = part
        else:
            current = joined
    return [*lines, current]


def problems(categories: list[str], overrides: list[str]) -> int:
    """``pkb-ray ls problems``: the table of the problems ``overrides`` choose, of ``categories`` (all
    when empty); 2 for a bad config or an unknown category (with close matches)."""
    try:
        cfg = compose_config(overrides)
        chosen = job_inputs(cfg, Path(".")).chosen
    except (ConfigError, ProblemError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if categories:
        known = sorted({p.meta.category for p in chosen.values()})
        unknown = [c for c in categories if c not in known]
        if unknown:
            close = "".join(did_you_mean(c, known, "--category ") for c in unknown)
            print(f"error: --category: no problem of {unknown}{close}; categories: {', '.join(known)}", file=sys.stderr)
            return 2
        chosen = {i: p for i, p in chosen.items() if p.meta.category in categories}
    print(table(problem_rows(cfg, chosen)))
    print(f"{len(chosen)} problem(s); speed of light: the bound at that size and W, "
          f"{cfg.eval.dtype or 'the first dtype'}, hardware={cfg.hardware.name}")
    return 0
