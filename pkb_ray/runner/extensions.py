"""Torch extensions that samples build with ``load_inline`` (an imported benchmark's CUDA solutions).

Such solutions call ``torch.utils.cpp_extension.load_inline`` (often through a helper of their
benchmark that wraps it, ``compile_cuda_extension``) on their first call. A build takes 30-70 s of CPU,
so the compile stage does it ahead, on CPU workers, and the rank only imports the result:

- :func:`prebuild` (compile stage, outside any rank): a sandboxed child process imports the sample,
  finds its ``load_inline`` / ``compile_cuda_extension`` calls in the source, evaluates each one whose
  arguments are known at module level, and builds it into the sample's own folder of the cache
  (``<cache>/torch_ext/<hash of the sample's source>``): a sample can only ever affect its own
  builds.
- :func:`install` (rank, before the candidate is imported): ``load_inline`` then looks up each call
  in that folder, by a hash of its arguments, and imports the library found there; a call the
  compile stage could not make (arguments known only at run time) is built on the rank into the
  job folder, within the trial step's build allowance.

Both sides key a call the same way (:func:`call_key`): name, sources, flags, include paths, the
architecture list in force, torch's version.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pkb_ray.runner.loading import load_candidate

BUILDERS = ("load_inline", "compile_cuda_extension")
RESULT_MARK = "PKB_PREBUILD_RESULT "
KEYED = ("cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
         "extra_include_paths", "with_cuda", "with_pytorch_error_handling", "use_pch", "is_python_module",
         "is_standalone", "keep_intermediates", "no_implicit_headers")


def builds_inline(source: str) -> bool:
    """Does the source call a torch-extension builder anywhere?"""
    try:
        return bool(builder_calls(source))
    except SyntaxError:
        return False


def arch_list(arch: str) -> str:
    """The TORCH_CUDA_ARCH_LIST torch would pick on a GPU of ``arch`` (``sm_90a`` -> ``9.0``): what
    a benchmark's helper sets and what a bare ``load_inline`` gets there. No arch-specific suffix, so
    a sample that needs ``sm_90a`` instructions fails to build as it does in its benchmark's harness."""
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)(\d)[a-z]?", arch.strip())
    return f"{m[1]}.{m[2]}" if m else arch


def sample_folder(cache_root: Path, source: str) -> Path:
    return Path(cache_root) / hashlib.sha256(source.encode()).hexdigest()[:32]


def call_key(name: str, kwargs: dict[str, Any]) -> str:
    import torch

    keyed = {k: kwargs.get(k) for k in KEYED}
    blob = json.dumps([name, keyed, os.environ.get("TORCH_CUDA_ARCH_LIST"), torch.__version__],
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _called(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _ninja_on_path() -> None:
    """torch runs ``ninja`` from PATH; the ``ninja`` wheel keeps its binary beside the package."""
    try:
        import ninja
    except ImportError:
        return
    bin_dir = getattr(ninja, "BIN_DIR", None)
    if bin_dir and bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def _import_library(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install(prebuilt: Path | None, build_root: Path, arch_list: str | None = None) -> dict[str, int]:
    """Route ``load_inline`` through the prebuilt folder (imports) or ``build_root`` (builds).

    Returns live counters {"prebuilt": imports from the compile stage, "built": distinct builds here}.
    """
    from torch.utils import cpp_extension

    _ninja_on_path()
    if arch_list and "TORCH_CUDA_ARCH_LIST" not in os.environ:
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list
    original = getattr(cpp_extension.load_inline, "__wrapped__", cpp_extension.load_inline)
    counts = {"prebuilt": 0, "built": 0}
    built: set[str] = set()
    loaded: dict[str, Any] = {}

    def load_inline(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        if args:  # positional beyond the sources: leave the call to torch as it is
            built.add(repr((name, args)))
            counts["built"] = len(built)
            return original(name, cpp_sources, cuda_sources, *args, **kwargs)
        kwargs = {**kwargs, "cpp_sources": cpp_sources, "cuda_sources": cuda_sources}
        key = call_key(name, kwargs)
        lib = prebuilt / key / f"{name}.so" if prebuilt else None
        if lib is not None and lib.is_file() and kwargs.get("is_python_module", True) \
                and not kwargs.get("is_standalone"):
            if key not in loaded:
                loaded[key] = _import_library(name, lib)
                counts["prebuilt"] = len(loaded)
            return loaded[key]
        built.add(key)  # torch builds a name once per process, however often it is asked for
        counts["built"] = len(built)
        if kwargs.get("build_directory") is None:
            kwargs["build_directory"] = str(build_root / key)
            Path(kwargs["build_directory"]).mkdir(parents=True, exist_ok=True)
        return original(name, **kwargs)

    load_inline.__wrapped__ = original
    cpp_extension.load_inline = load_inline
    # a helper imported before this hook (a benchmark's helper module) bound the original by name
    for module in list(sys.modules.values()):
        if getattr(module, "load_inline", None) is original and module is not cpp_extension:
            module.load_inline = load_inline
    return counts


def _build_failed(exc: BaseException) -> bool:
    """torch's own words when the compiler or linker failed (not a missing toolkit, not our hook)."""
    return isinstance(exc, RuntimeError) and "Error building extension" in str(exc)


def _build_child(sample_path: str, out_dir: str, extra_path: str, arch_list: str) -> dict[str, Any]:
    """In the sandboxed child: import the sample, make each builder call it can, report."""
    for p in reversed([p for p in extra_path.split(os.pathsep) if p]):
        sys.path.insert(0, p)

    os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list  # no GPU here to ask
    counts = install(None, Path(out_dir))
    try:
        module = load_candidate(sample_path)  # a build at module level happens here
    except BaseException as exc:  # noqa: BLE001 - its import fails on the rank too: that is the verdict's job
        if counts["built"] and _build_failed(exc):
            return {"error": f"{type(exc).__name__}: {exc}"[-6000:]}
        return {"built": 0, "skipped": -1, "note": "import failed: " + traceback.format_exc(limit=3)[-800:]}
    skipped, notes = 0, []
    for call in builder_calls(Path(sample_path).read_text()):
        before = counts["built"]
        try:
            make_call(call, module, sample_path)
        except BaseException as exc:  # noqa: BLE001
            if counts["built"] > before and _build_failed(exc):
                return {"error": f"{type(exc).__name__}: {exc}"[-6000:]}  # the compiler's message is the verdict
            # arguments known only at run time, or no CUDA toolkit here (a CPU-only torch): the rank builds it
            skipped += 1
            notes.append(f"{type(exc).__name__}: {exc}"[:300])
    return {"built": counts["built"], "skipped": skipped, "notes": notes}


def builder_calls(source: str) -> list[ast.Call]:
    """Every call of a torch-extension builder in the source, wherever it is."""
    return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and _called(n.func) in BUILDERS]


def make_call(call: ast.Call, module, filename: str):
    """Evaluate one builder call with the imported module's globals (its arguments must be known there)."""
    return eval(compile(ast.Expression(call), filename, "eval"), module.__dict__)  # noqa: S307 - sandboxed


def main(argv: list[str]) -> int:
    t0 = time.monotonic()
    try:
        out = _build_child(*argv)
    except BaseException:  # noqa: BLE001
        out = {"built": 0, "skipped": -1, "note": traceback.format_exc(limit=3)[-800:]}
    out["seconds"] = round(time.monotonic() - t0, 2)
    sys.stdout.flush()
    print("\n" + RESULT_MARK + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
