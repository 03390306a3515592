"""What a run covers: paths given in a config, the problems it chooses (checked against the config),
and the sample rows it replays; :func:`job_inputs` resolves all of it for one job.

Shared by the entry points (``pkb_ray.sweep``, ``pkb_ray.baselines``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pkb_ray.generate.samples import read_samples
from pkb_ray.problem import LADDER, Problem, load_problems
from pkb_ray.results.storage import check, is_remote, is_uri, local_path
from pkb_ray.spec import formats
from pkb_ray.spec.config import ALL_PROBLEMS, ConfigError, HardwareConfig, SweepConfig, did_you_mean
from pkb_ray.spec.names import Backend
from pkb_ray.spec.paths import CODE_ROOT, CONF_DIR, DATA_ROOT


def resolve_path(path: str) -> Path:
    """A relative path is taken from the current folder, else from pkb_ray's own folders (the
    checkout's root, or the data an installed wheel carries)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() or p.exists() else DATA_ROOT / p


def with_problems_folder(cfg: SweepConfig) -> SweepConfig:
    """``cfg`` with ``problems_dir`` naming the folder its problems are loaded from everywhere (gangs,
    compile workers, rank processes): the files its ``problems.format`` writes at start, if any
    (:meth:`pkb_ray.spec.formats.SampleFormat.problems_folder`)."""
    folder = formats.get(cfg.problems.format).problems_folder(cfg)
    if folder is None:
        return cfg
    return cfg.model_copy(update={"problems_dir": str(folder)})


def private_paths(cfg: SweepConfig) -> list[Path]:
    """What no rank process may read or write: the run's outputs (results, generated samples, W&B
    files) and the sample files. A folder that holds the code or the Python the ranks need (e.g.
    an output folder of ".") is left visible; its results folder is still hidden."""
    out = resolve_path(cfg.output_dir).resolve()
    paths = [out, out / "results", out / "generated", out / "wandb"]
    # a bucket is no path to hide: ranks get no credentials for it (their environment is an allowlist)
    given = [p for p in (cfg.results_dir, cfg.generated_dir, cfg.model.samples) if p and not is_remote(p)]
    paths += [resolve_path(str(local_path(p))).resolve() for p in given]
    needed = [CODE_ROOT, DATA_ROOT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    return [p for p in dict.fromkeys(paths)
            if p.exists() and not any(n == p or n.is_relative_to(p) for n in needed)]


def hardware_profile(name: str) -> HardwareConfig:
    """The hardware profile ``conf/hardware/<name>.yaml``, validated (for scripts outside Hydra)."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "hardware" / f"{name}.yaml"))
    raw.pop("defaults", None)  # Hydra's: the eval profile it picks
    return HardwareConfig.model_validate(raw)


def _size_fields(cfg: SweepConfig) -> list[tuple[str, Any]]:
    if not cfg.eval.sizes:
        return [("eval.size", cfg.eval.size)]
    return [(f"eval.sizes.{i}", spec) for i, spec in enumerate(cfg.eval.sizes)]


def _check_size(p: Problem, key: str, spec: Any) -> None:
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(p.meta.sizes["default"]))
        if unknown:
            raise ConfigError(f"{key}: {p.id} has no size knob {unknown} ({sorted(p.meta.sizes['default'])})")
    elif spec != LADDER and spec not in p.meta.sizes:
        raise ConfigError(f"{key}: {spec!r} is not a size preset of {p.id} ({sorted(p.meta.sizes)}) nor {LADDER!r}")


def check_against_problems(cfg: SweepConfig, problems: dict[str, Problem]) -> dict[str, Problem]:
    """The problems this run covers; a config naming something they lack fails here, naming the key."""
    unknown = sorted(set(cfg.problems.ids or []) - set(problems))
    if unknown:
        said = ", ".join(f"{u!r}{did_you_mean(u, problems)}" for u in unknown)
        raise ConfigError(f"problems.ids: unknown problem id(s) {said} (pkb-ray ls problems lists them)")
    chosen = {i: p for i, p in problems.items() if not cfg.problems.ids or i in cfg.problems.ids}
    if cfg.problems.categories:
        chosen = {i: p for i, p in chosen.items() if p.meta.category in cfg.problems.categories}
        if not chosen:
            raise ConfigError(f"problems.categories: no problem in {cfg.problems.categories}")
    for p in chosen.values():
        for key, spec in _size_fields(cfg):
            _check_size(p, key, spec)
        if cfg.eval.dtype and cfg.eval.dtype not in p.meta.dtypes:
            raise ConfigError(f"eval.dtype: {cfg.eval.dtype!r} is not supported by {p.id} ({p.meta.dtypes})")
    for pid, per_dtype in cfg.eval.tolerances.items():
        if pid != ALL_PROBLEMS and pid not in problems:
            raise ConfigError(f"eval.tolerances.{pid}: unknown problem id; known: {sorted(problems)} or {ALL_PROBLEMS}")
        covered = problems.values() if pid == ALL_PROBLEMS else [problems[pid]]
        dtypes = {d for p in covered for d in p.meta.dtypes}
        for dtype in per_dtype:
            if dtype not in dtypes:
                raise ConfigError(f"eval.tolerances.{pid}.{dtype}: not a dtype of {pid} ({sorted(dtypes)})")
    return chosen


def select_rows(rows: list[dict[str, Any]], cfg: SweepConfig, problems: dict[str, Problem]) -> list[dict[str, Any]]:
    """Keep the rows of the problems and backends this run covers (rows naming unknown problems stay:
    validate reports them)."""
    ids = set(cfg.problems.ids or problems)
    if cfg.problems.categories:
        ids &= {p.id for p in problems.values() if p.meta.category in cfg.problems.categories}
    backends = cfg.backend.backends
    kept = [r for r in rows if (r.get("problem_id") in ids or r.get("problem_id") not in problems)
            and (backends is None or r.get("backend", Backend.TORCH) in backends)]
    return first_samples(kept, cfg.model.limit_per_problem)


def first_samples(rows: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """At most ``limit`` rows per model and problem, those of the lowest sample indices (rows without
    a usable index last), in their order; None: all of them."""
    if limit is None:
        return rows

    def index(r: dict[str, Any]) -> float:
        i = r.get("sample_index")
        return i if isinstance(i, int) and not isinstance(i, bool) else float("inf")

    groups: dict[tuple, list[int]] = {}
    for n, r in enumerate(rows):
        groups.setdefault((r.get("model"), r.get("problem_id")), []).append(n)
    keep = {n for members in groups.values() for n in sorted(members, key=lambda n: (index(rows[n]), n))[:limit]}
    return [r for n, r in enumerate(rows) if n in keep]


@dataclass(frozen=True)
class JobInputs:
    """What one job runs on, resolved from its config before any work: the config with its problems
    folder filled in, every problem of its source and the chosen ones, and its folders."""

    cfg: SweepConfig
    problems: dict[str, Problem]
    chosen: dict[str, Problem]
    problems_dir: str | None  # the folder every process loads the problems from (None: the shipped ones)
    results_dir: Path | str  # a local folder, or a remote URI as given (pkb_ray.results.storage)
    generated_dir: Path | str

    @property
    def samples_path(self) -> Path | None:
        """The replayed sample set (folder or file); None for a generating model."""
        return resolve_path(self.cfg.model.samples) if self.cfg.model.provider == "replay" else None

    def make_folders(self) -> None:
        """The local ones of the results and generated folders (a bucket needs none)."""
        for folder in (self.results_dir, self.generated_dir):
            if isinstance(folder, Path):
                folder.mkdir(parents=True, exist_ok=True)

    def replayed_rows(self) -> list[dict[str, Any]]:
        """The sample rows of ``model.samples`` this run covers. All problems are loaded: a row naming
        a problem of none is kept (validate reports it), one of another set is not."""
        rows = read_samples(self.samples_path, self.cfg.model.name, self.problems)
        return select_rows(rows, self.cfg, self.problems)


def job_inputs(cfg: SweepConfig, out_dir: Path) -> JobInputs:
    """Resolve ``cfg`` for a job writing under ``out_dir``; a config naming what does not exist fails
    here (:class:`~pkb_ray.spec.config.ConfigError`, naming the key)."""
    cfg = with_problems_folder(cfg)
    folder = resolve_path(cfg.problems_dir) if cfg.problems_dir else None
    problems = load_problems(folder)
    chosen = check_against_problems(cfg, problems)
    return JobInputs(
        cfg=cfg, problems=problems, chosen=chosen, problems_dir=str(folder) if folder else None,
        results_dir=run_folder(cfg.results_dir, "results_dir") if cfg.results_dir else out_dir / "results",
        generated_dir=run_folder(cfg.generated_dir, "generated_dir") if cfg.generated_dir else out_dir / "generated")


def run_folder(value: str, key: str) -> Path | str:
    """A folder a run writes: a path (resolved), a ``file://`` URI (its path), or a remote URI, as
    given once it proved writable (:func:`pkb_ray.results.storage.check`: else ConfigError naming ``key``)."""
    if not is_uri(value):
        return resolve_path(value)
    folder = check(value, key)
    return Path(folder.path) if folder.is_local else value
