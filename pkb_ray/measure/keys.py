"""The secrets that one sample's inputs derive from: one per rank, one shared by all ranks.

The trusted side (the harness) draws them for every sample and sends each rank only its own (and
the shared one) with every command that makes inputs (:meth:`pkb_ray.isolation.ranks.RankSet.send`). A rank's
inputs of a call labelled ``label`` (a trial seed, a base set's seed, a timed call's seed) come
from :func:`derived` of its own key, so no rank can rebuild another rank's inputs: a collective
must communicate. Data a problem needs identical on every rank (weights, routing tables, split
sizes: ``InputContext.shared_generator``) comes from the shared key. The clean rank that checks
rank r holds rank r's key too, and a second pair of keys (``timed``) that no candidate's rank
gets: the base sets of timed calls' inputs, which the trusted side writes into the ranks
(:mod:`pkb_ray.evaluate.staging`), derive from those where the problem's shapes allow. Without keys (a problem's own check, a quiet baseline with no
candidate) the labels are the seeds themselves. Pure: no processes.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

SHARED = "shared"  # the key of the data every rank has alike
KEY_BITS = 62


def derived(key: int, label: int) -> int:
    """The seed of ``label`` under ``key``: unpredictable without the key."""
    digest = hashlib.blake2b(f"{key}:{label}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


TIMED = "timed:"  # the prefix of the keys of timed calls' inputs, which only clean ranks get


@dataclass(frozen=True)
class InputKeys:
    shared: int
    ranks: dict[int, int]
    # the base sets of timed calls' inputs: a second key per rank and a shared one, sent to clean
    # ranks only, so that no candidate's rank knows anything of any rank's timed inputs
    timed_shared: int = 0
    timed: dict[int, int] | None = None

    @classmethod
    def draw(cls, ranks: list[int]) -> "InputKeys":
        return cls(secrets.randbits(KEY_BITS), {r: secrets.randbits(KEY_BITS) for r in ranks},
                   secrets.randbits(KEY_BITS), {r: secrets.randbits(KEY_BITS) for r in ranks})

    def as_wire(self) -> dict[str, int]:
        """Every key a candidate's set may get, as a command carries it to the set (:func:`for_rank`
        then keeps one rank's)."""
        return {SHARED: self.shared, **{str(r): k for r, k in self.ranks.items()}}

    def for_clean(self) -> dict[str, int]:
        """:meth:`as_wire` and the timed calls' keys: for clean sets' commands only."""
        timed = {f"{TIMED}{r}": k for r, k in (self.timed or {}).items()}
        return {**self.as_wire(), **({f"{TIMED}{SHARED}": self.timed_shared, **timed} if timed else {})}


def for_rank(keys: dict[str, int], rank: int) -> dict[str, int]:
    """What of ``keys`` (as on the wire) rank ``rank`` gets: its own and the shared ones."""
    return {k: v for k, v in keys.items() if k in (SHARED, str(rank), f"{TIMED}{SHARED}", f"{TIMED}{rank}")}
