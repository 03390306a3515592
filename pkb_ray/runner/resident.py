"""Reference outputs a clean rank keeps on its device between samples, keyed by content hash.

A clean rank reads a reference file once, checks its bytes against the SHA-256 from the store's
signed manifest, and keeps the decoded value; a later sample whose manifest names the same hash is
judged against the kept value without touching the disk. The key is the content, not the path: a
regenerated entry with the same bytes hits, a changed one misses. Only clean ranks (which never
import a candidate) hold one, so what is kept cannot have been changed since it was verified.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

# per rank; the GPU's share is small next to an H100/H200's memory, which the candidates need
BUDGET_BYTES = {"cuda": 4 << 30, "cpu": 1 << 30}


def nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    return 0


class Resident:
    """A least-recently-used map from SHA-256 to value, within a byte budget."""

    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self._items: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self.used = 0
        self.hits = 0

    def get(self, digest: str | None) -> Any | None:
        item = self._items.get(digest) if digest else None
        if item is None:
            return None
        self._items.move_to_end(digest)
        self.hits += 1
        return item[0]

    def put(self, digest: str, value: Any) -> None:
        size = nbytes(value)
        if size > self.budget or digest in self._items:
            return
        while self.used + size > self.budget:
            _, (_, freed) = self._items.popitem(last=False)
            self.used -= freed
        self._items[digest] = (value, size)
        self.used += size
