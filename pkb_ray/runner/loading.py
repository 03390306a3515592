"""Importing a candidate's file on a rank, and its traceback without the harness's frames."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType


def candidate_traceback() -> str:
    """The current exception's traceback without the harness's own frames."""
    exc = sys.exc_info()[1]
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/pkb_ray/runner/" not in f.filename and not f.filename.startswith("<frozen")]
    return ("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
            + "".join(traceback.format_exception_only(type(exc), exc)))


def load_candidate(path: str | Path) -> ModuleType:
    """Import the candidate's source file as the module ``candidate``."""
    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    return module
