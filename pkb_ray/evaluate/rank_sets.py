"""How one gang starts its rank sets: what each role's sandbox shows and hides, the ranks' environment
and threads, and the warm templates a candidate's set forks from (one node's sets only)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from pkb_ray.cuda import DEFAULT_ARCH, ENV_ARCH, ENV_CACHE, ENV_TIMEOUT
from pkb_ray.isolation import sandbox
from pkb_ray.isolation.ranks import RankIsolation, Ranks, RankSet
from pkb_ray.isolation.zygote import Zygotes
from pkb_ray.problem import Problem
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.names import Role


class RankSets:
    """Starts the rank sets of one gang's W devices, each in the sandbox of its role."""

    def __init__(self, devices: list[str], cfg: EvalConfig, hardware: HardwareConfig, problems: dict[str, Problem],
                 work_dir: Path, cache_dir: Path, launcher: Callable[..., Ranks] | None = None,
                 private: list[Path] = ()):
        """``launcher(job_dir=..., backend=..., ...)``: a maker of rank sets spread over nodes
        (:class:`pkb_ray.isolation.spread.SpreadRankSet`); by default a :class:`RankSet` on
        ``devices``. ``private``: paths no rank may see, besides the secrets under HOME and, for
        candidates, the cache and the work folder."""
        self.devices, self.cfg, self.hardware = devices, cfg, hardware
        self._launcher = launcher
        self.nodes = getattr(launcher, "nodes", 1)
        (cache_dir / "cuda").mkdir(parents=True, exist_ok=True)
        (cache_dir / "torch_ext").mkdir(parents=True, exist_ok=True)  # load_inline builds (runner.extensions)
        self.probe = sandbox.probe(sandbox.Isolation(cfg.isolation))  # raises when the level cannot be had
        self.isolation = self.probe.level.value
        self._roles = _isolation_by_role(self.isolation, problems, work_dir, cache_dir, private,
                                         gpu=hardware.device == "cuda")
        # candidates' sets forked from a template that imported torch once (one node's sets only)
        self.zygotes = Zygotes(work_dir, cfg.startup_timeout_s) if (
            cfg.zygote and launcher is None and self.probe.level is sandbox.Isolation.SANDBOX) else None
        # where load_cuda in a rank finds what the compile stage built (pkb_ray.cuda), and the
        # profile's NCCL settings (network interfaces between nodes, transports)
        self._env = {ENV_ARCH: hardware.arch or DEFAULT_ARCH, ENV_CACHE: str(cache_dir / "cuda"),
                     ENV_TIMEOUT: str(cfg.compile_timeout_s), **hardware.nccl_env,
                     **(hardware.spread_nccl_env if self.nodes > 1 else {})}

    def spawn(self, job_dir: Path, role: Role) -> Ranks:
        """A new rank set of ``role`` working in ``job_dir``."""
        threads = max(1, (os.cpu_count() or 1) * self.nodes // len(self.devices))
        # the ranks' own collective timeout is a backstop: the parent kills a step at timeout_s first,
        # so a hang is reported as a timeout, not as the crash NCCL's watchdog would make of it
        options = dict(backend=self.hardware.backend, job_dir=job_dir, pg_timeout_s=self.cfg.timeout_s + 15.0,
                       num_threads=threads, multicast=self.hardware.nvlink_multicast, env=self._env,
                       isolation=self._roles[role], role=role)
        if self._launcher is not None:
            return self._launcher(**options)
        return RankSet(self.devices, **options, zygotes=self.zygotes)

    def close(self) -> None:
        if self.zygotes is not None:
            self.zygotes.close()


def _isolation_by_role(level: str, problems: dict[str, Problem], work_dir: Path, cache_dir: Path,
                       private: list[Path], gpu: bool) -> dict[Role, RankIsolation]:
    """What each role's sandbox shows: the problem files and what they name READABLE (an imported
    benchmark's checkout) to both; the build caches to candidates, which never see the work folder;
    the work folder to the clean set, which writes each sample's references and reads its captures."""
    hidden = [*map(str, sandbox.default_hidden()), *map(str, private)]
    needed = tuple(sorted({str(p.path.parent) for p in problems.values()}
                          | {str(r) for p in problems.values() for r in getattr(p.module, "READABLE", ())}))
    return {
        Role.CANDIDATE: RankIsolation(level, hide=(*hidden, str(cache_dir), str(work_dir)),
                                      readable=(str(cache_dir / "cuda"), str(cache_dir / "torch_ext"), *needed),
                                      gpu=gpu),
        Role.CLEAN: RankIsolation(level, hide=tuple(hidden), readable=needed, writable=(str(work_dir),), gpu=gpu),
    }
