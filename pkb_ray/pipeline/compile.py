"""Compiling a sample before any GPU time is spent on it.

Every sample goes through Python's compiler (a ``SyntaxError`` becomes a ``compile_error`` with
the line and the compiler's message). A sample that loads inline CUDA (``load_cuda``, see
:mod:`pkb_ray.cuda`) also has each of its CUDA sources built by nvcc for the target
architecture, on a pool of CPU-only Ray actors, in parallel; a source shared by several samples
is built once, and a build already in the cache is not built again. nvcc's errors become the
sample's ``compile_error`` message.

A sample of a format whose samples build torch extensions with ``load_inline``
(:attr:`pkb_ray.spec.formats.SampleFormat.builds_extensions`) has them built here too, by a sandboxed
import of the sample (:mod:`pkb_ray.runner.extensions`), into a cache folder of its own that its
rank imports from.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pkb_ray.isolation import allowlist, sandbox

from pkb_ray.cuda import DEFAULT_ARCH, BuildSpec, CudaBuildError, build, find_sources
from pkb_ray.isolation.ranks import RankIsolation
from pkb_ray.isolation.sandbox import Isolation
from pkb_ray.runner import extensions
from pkb_ray.spec import formats
from pkb_ray.spec.names import Status
from pkb_ray.spec.paths import CODE_ROOT
from pkb_ray.spec.schema import Result, Sample, Where



@dataclass(frozen=True)
class BuildSettings:
    arch: str
    cache_dir: Path
    timeout_s: float
    isolation: str = "none"  # nvcc on a candidate's source runs in a sandbox (see pkb_ray.cuda.build)
    hide: tuple[str, ...] = ()  # paths nvcc must not see: the run's outputs and samples
    inline_timeout_s: float = 600.0  # a sample's load_inline builds, together


def needs_build(sample: Sample) -> bool:
    """CUDA sources (``load_cuda``), or torch extensions (``load_inline``) of a format whose samples build them."""
    return uses_cuda(sample) or (formats.of(sample.metadata).builds_extensions and extensions.builds_inline(sample.source))


def compile_sample(sample: Sample, where: Where | int, category: str = "") -> Sample | Result:
    """Python's compiler on the source: the sample itself, or its ``compile_error``."""
    try:
        compile(sample.source, "candidate.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        text = f"\n    {exc.text.rstrip()}" if isinstance(exc, SyntaxError) and exc.text else ""
        line = f"candidate.py, line {exc.lineno}: " if isinstance(exc, SyntaxError) and exc.lineno else ""
        what = exc.msg if isinstance(exc, SyntaxError) else exc
        return Result.for_sample(sample, Status.COMPILE_ERROR, f"{line}{type(exc).__name__}: {what}{text}",
                                 category=category, **Where.of(where).fields)
    return sample


def uses_cuda(sample: Sample) -> bool:
    return "load_cuda" in sample.source


def build_sources(module_source: str, settings: BuildSettings) -> dict[str, Any]:
    """Build every CUDA source of one module: {"keys", "seconds", "hits"} or {"error"}."""
    t0, keys, hits = time.monotonic(), [], 0
    for source, flags in find_sources(module_source):
        spec = BuildSpec(source, settings.arch, flags)
        hits += (settings.cache_dir / spec.key() / "lib.so").exists()
        try:
            build(spec, settings.cache_dir, settings.timeout_s, Isolation(settings.isolation),
                  [Path(p) for p in settings.hide])
        except CudaBuildError as exc:
            return {"error": f"CUDA source {len(keys) + 1}: {exc}", "seconds": time.monotonic() - t0}
        keys.append(spec.key())
    return {"keys": keys, "hits": hits, "seconds": time.monotonic() - t0}


def build_inline(module_source: str, settings: BuildSettings, paths: Sequence[str] = ()) -> dict[str, Any]:
    """Build a sample's ``load_inline`` extensions into its own cache folder: {"folder", "seconds",
    "built", "skipped"} or {"error"}. ``paths``: what the sample imports besides torch (its problem's
    ``READABLE`` folders), put on its ``sys.path`` and left readable in the sandbox."""
    t0 = time.monotonic()
    root = settings.cache_dir.parent / "torch_ext"
    final = extensions.sample_folder(root, module_source)
    if (final / "done").exists():
        return {"folder": str(final), "seconds": time.monotonic() - t0, "built": 0, "skipped": 0, "hits": 1}
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    try:
        (work / "sample.py").write_text(module_source)
        (work / "ext").mkdir()
        probe = sandbox.probe(Isolation(settings.isolation))
        iso = RankIsolation(probe.level.value, hide=(*map(str, sandbox.default_hidden()), *settings.hide),
                            readable=tuple(p for p in paths if Path(p).exists()), gpu=True)
        policy = iso.policy(work, 1)
        argv = [sys.executable, "-m", "pkb_ray.runner.extensions", str(work / "sample.py"), str(work / "ext"),
                os.pathsep.join([*paths, str(CODE_ROOT)]), extensions.arch_list(settings.arch)]
        env = sandbox.child_env(os.environ, {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": allowlist.ranks_pythonpath()},
                                probe.level)
        try:
            done = sandbox.run(sandbox.Spec(argv, policy, probe, env, cwd_in_sandbox=str(work), host_cwd=work),
                               settings.inline_timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"its torch extensions did not build within {settings.inline_timeout_s:.0f} s",
                    "seconds": time.monotonic() - t0}
        line = next((ln for ln in reversed(done.stdout.splitlines()) if ln.startswith(extensions.RESULT_MARK)), None)
        if line is None:  # the child died (or the sample ended it): the rank will build, or fail, itself
            return {"folder": "", "seconds": time.monotonic() - t0, "built": 0, "skipped": -1}
        out = json.loads(line[len(extensions.RESULT_MARK):])
        if "error" in out:
            return {"error": "torch extension build failed: " + out["error"].replace(str(work) + "/", ""),
                    "seconds": time.monotonic() - t0}
        (work / "ext" / "done").write_text(json.dumps(out))
        try:
            (work / "ext").rename(final)  # another worker may have won the race: its build is as good
        except OSError:
            pass
        return {"folder": str(final), "seconds": time.monotonic() - t0, "built": out.get("built", 0),
                "skipped": out.get("skipped", 0)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_settings(arch: str | None, cache_dir: Path, timeout_s: float, isolation: str = "none",
                   hide: Sequence[Path] = (), inline_timeout_s: float = 600.0) -> BuildSettings:
    hide = tuple(map(str, hide))
    return BuildSettings(arch or DEFAULT_ARCH, Path(cache_dir) / "cuda", timeout_s, isolation, hide, inline_timeout_s)


def apply_build(sample: Sample, outcome: dict[str, Any], where: Where | int, category: str) -> Sample | Result:
    """The sample ready for a gang (its build keys noted), or its ``compile_error``."""
    if "error" in outcome:
        return Result.for_sample(sample, Status.COMPILE_ERROR, outcome["error"], category=category,
                                 **Where.of(where).fields)
    meta = {**sample.metadata, "compile_seconds": f"{outcome['seconds']:.2f}"}
    if "keys" in outcome:
        meta["cuda_builds"] = ",".join(outcome["keys"])
    if outcome.get("folder"):
        meta["torch_extensions"] = outcome["folder"]
    return sample.model_copy(update={"metadata": meta})
