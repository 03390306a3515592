"""Read back what an offline W&B run wrote (``run-<id>.wandb``), for tests.

wandb >= 0.19 writes runs from its Go core and ships no Python reader, so this reads the file
format directly: a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then LevelDB-log framing
(32 KiB blocks; records of crc32 (4), length (2), type (1: full, 2: first, 3: middle, 4: last))
around protobuf ``Record`` messages from ``wandb.proto.wandb_internal_pb2``.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32 * 1024
HEADER = b":W&B\xe1\xbe\x00"


def records(path: Path, within_s: float = 30.0) -> list[pb.Record]:
    """The run's records, once its ``exit`` record is on disk: W&B's core process writes the file
    after ``run.finish()`` returns, and a reader on a loaded machine has seen it without its last
    summary (up to ``within_s``; then what is there)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            out = _parse(path)
        except ValueError:  # a record still being written
            out = []
        if any(r.WhichOneof("record_type") == "exit" for r in out) or time.monotonic() > deadline:
            return out or _parse(path)
        time.sleep(0.2)


def _parse(path: Path) -> list[pb.Record]:
    data = Path(path).read_bytes()
    assert data.startswith(HEADER), f"{path}: not a W&B run file"
    pos, out, parts = len(HEADER), [], b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # block trailer: padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if len(chunk) < length:
            raise ValueError(f"{path}: a record cut short at byte {pos - 7 - length}")
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(parts + chunk)
            out.append(rec)
            parts = b""
        elif kind in (2, 3):
            parts += chunk
        else:
            raise ValueError(f"{path}: bad record type {kind} at byte {pos}")
    return out


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def summary(path: Path) -> dict:
    """The run's final summary: key -> value (JSON-decoded), the last update of each key winning."""
    out = {}
    for rec in records(path):
        if rec.WhichOneof("record_type") == "summary":
            for item in rec.summary.update:
                out[_key(item)] = json.loads(item.value_json)
    return out


def run_record(path: Path):
    return next(r.run for r in records(path) if r.WhichOneof("record_type") == "run")


def config(path: Path) -> dict:
    """The run's config: the run record's, then every later ``config.update`` in order."""
    out = {_key(i): json.loads(i.value_json) for i in run_record(path).config.update}
    for r in records(path):
        if r.WhichOneof("record_type") == "config":
            out.update({_key(i): json.loads(i.value_json) for i in r.config.update})
    return out


def history_keys(path: Path) -> set[str]:
    return {_key(i) for r in records(path) if r.WhichOneof("record_type") == "history" for i in r.history.item}


def artifacts(path: Path) -> list[tuple[str, str]]:
    """(name, type) of every Artifact the run logged."""
    return [(r.artifact.name, r.artifact.type) for r in records(path) if r.WhichOneof("record_type") == "artifact"]


def artifact_metadata(path: Path) -> dict[str, dict]:
    """name -> the metadata of every Artifact the run logged."""
    return {r.artifact.name: json.loads(r.artifact.metadata or "{}") for r in records(path)
            if r.WhichOneof("record_type") == "artifact"}


def history_steps(path: Path, key: str) -> list:
    """The values ``key`` took, one per history step that logged it."""
    return [json.loads(i.value_json) for r in records(path) if r.WhichOneof("record_type") == "history"
            for i in r.history.item if _key(i) == key]
