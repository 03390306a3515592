"""The ``pkb`` section of the sweep's config (``pkb.root``, ...): ParallelKernelBench as a source of
problems (``problems.format=pkb``) and of samples (its solution folders). The core's config adds it
under the format's name (:func:`pkb_ray.spec.formats.settings_sections`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PkbSettings(BaseModel):
    """ParallelKernelBench as a source of problems (problems.format=pkb) and samples (its solution folders)."""

    model_config = ConfigDict(extra="forbid")
    root: str | None = Field(None, description="a checkout of togethercomputer/ParallelKernelBench")
    faithful_inputs: bool = Field(False, description="true: PKB's inputs exactly (trial = seed); false: problems "
                                                     "whose builder gives constant inputs get random ones")
    shim_dir: str = Field("~/.cache/pkb_ray_pkb", description="where the generated problem files go (rank "
                                                              "processes must read them: not under cache_dir)")
