"""ParallelKernelBench behind :mod:`pkb_ray.spec.formats`: what its problems and solution folders need of
the core. Registered there as ``pkb`` (``problems.format=pkb``, ``metadata.format: pkb``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pkb_ray.pkb.settings import PkbSettings
from pkb_ray.pkb.solutions import REMOVED, is_solution_folder, number_mismatches, read_solutions
from pkb_ray.spec.formats import SampleFormat, SecondVerdict


def _agrees(expected: Any, actual: Any) -> bool:
    from pkb_ray.pkb.verdict import pkb_agrees  # torch: only where outputs are compared

    return pkb_agrees(expected, actual)


class PkbFormat(SampleFormat):
    name = "pkb"
    positional = True  # PKB calls solution(*inputs): parameter names are free
    builds_extensions = True  # its CUDA and Triton solutions call load_inline on first call
    settings = PkbSettings  # the config's pkb section
    example = "pkb-ray sweep problems=pkb pkb.root=~/src/pkb model.samples=<folder of solutions_*>"
    verdict = SecondVerdict(
        column="pkb_verdict", agrees=_agrees, title="PKB's verdict beside pkb_ray's", passes="pkb_correct",
        note="pkb_verdict is ParallelKernelBench's own rule on the same outputs (first call only, allclose "
             "1e-2 after a float cast; dtype, inputs and timed calls not checked). Each row: a model's samples "
             "that one rule passes and the other does not, with pkb_ray's status and the first line of why.")

    def read(self, path: Path, model: str) -> list[dict[str, Any]] | None:
        if not is_solution_folder(path):
            return None
        return read_solutions(path, None if model == "replay" else model)

    def annotate(self, rows: list[dict[str, Any]], problems: dict[str, Any]) -> None:
        number_mismatches(rows, {pid: p.module.NUMBER for pid, p in problems.items() if hasattr(p.module, "NUMBER")})

    def problems_folder(self, cfg: Any) -> Path:
        from pkb_ray.pipeline.selection import resolve_path
        from pkb_ray.pkb.checkout import CheckoutError
        from pkb_ray.pkb.shims import write_shims
        from pkb_ray.spec.config import ConfigError

        if not cfg.pkb.root:
            raise ConfigError("pkb.root: problems.format=pkb needs the path of a ParallelKernelBench checkout")
        try:
            return write_shims(resolve_path(cfg.pkb.root), cfg.pkb.shim_dir, faithful=cfg.pkb.faithful_inputs)
        except CheckoutError as exc:
            raise ConfigError(str(exc)) from None

    def unknown_problem(self, sample: Any) -> str:
        if sample.metadata.get("pkb_problem") == REMOVED:
            return f"problem {sample.metadata.get('pkb_name', sample.problem_id)!r} was removed from PKB upstream"
        return ""


FORMAT = PkbFormat()
