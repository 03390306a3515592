"""What every benchmark shares: the checkout, where its JSON goes, and what it records of the run.

Every benchmark writes its figures as JSON to ``--out`` or, by default, to a new file (or folder)
``docs/benchmarks/data/<name>_<UTC date-time>.json`` of this checkout. Each JSON has a ``run``
entry saying how it was made: the command (``python -m benchmarks NAME ARGS``), its arguments, the
git commit of the pkb_ray it imported (and whether that tree had uncommitted changes), the date and
the host. A file left in docs/benchmarks/data must be cited by a page of docs/benchmarks (the test
suite checks it): cite it, or move it elsewhere.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "docs" / "benchmarks" / "data"


def _git(tree: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def pkb_ray_tree() -> Path:
    """The folder holding the pkb_ray that imports resolve to (found without importing it): this
    checkout, or another tree put first on PYTHONPATH for a before/after comparison."""
    spec = importlib.util.find_spec("pkb_ray")
    return Path(spec.origin).resolve().parent.parent if spec and spec.origin else REPO


def provenance(name: str, argv: list[str]) -> dict:
    """How a benchmark's figures were made. ``commit`` is None outside a git checkout (a copied
    tree, as on the device machine): ``PKB_COMMIT`` then names it, when set."""
    tree = pkb_ray_tree()
    commit = _git(tree, "rev-parse", "HEAD")
    status = _git(tree, "status", "--porcelain", "--untracked-files=no") if commit else None
    return {"command": shlex.join(["python", "-m", "benchmarks", name, *argv]), "argv": list(argv),
            "process_argv": list(sys.argv), "commit": commit or os.environ.get("PKB_COMMIT"),
            "uncommitted_changes": bool(status) if status is not None else None, "pkb_ray": str(tree),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "python": platform.python_version()}


@dataclass(frozen=True)
class Run:
    """One benchmark run: its registered name and its arguments, for its output path and record."""

    name: str
    argv: tuple[str, ...]

    @classmethod
    def of(cls, module: str, argv: list[str]) -> Run:
        """``Run.of(__name__, argv)`` in a benchmark module: its name is the module's."""
        return cls(module.rsplit(".", 1)[-1], tuple(argv))

    def parser(self, doc: str | None, *, out_help: str = "") -> argparse.ArgumentParser:
        """An argument parser showing the module's docstring, with ``--out`` added."""
        ap = argparse.ArgumentParser(prog=f"python -m benchmarks {self.name}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
        ap.add_argument("--out", type=Path, default=None,
                        help=out_help or f"the JSON to write (default: {self.default_out().relative_to(REPO).parent}/"
                                         f"{self.name}_<date-time>.json)")
        return ap

    def default_out(self, folder: bool = False) -> Path:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
        return DATA / (f"{self.name}_{stamp}" + ("" if folder else ".json"))

    def out(self, given: Path | None, folder: bool = False) -> Path:
        """``--out`` as given, else a new path under docs/benchmarks/data. Creates nothing."""
        return Path(given) if given is not None else self.default_out(folder)

    def record(self) -> dict:
        return provenance(self.name, list(self.argv))

    def write(self, path: Path, data: dict | list) -> Path:
        """``data`` as JSON at ``path`` with the run's record first (a list goes under ``rows``)."""
        body = {"run": self.record(), **(data if isinstance(data, dict) else {"rows": data})}
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body, indent=1, default=str) + "\n")
        return path


def script(name: str) -> ModuleType:
    """A module of scripts/ (the tools kept there, e.g. make_samples), imported by its path."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
