"""Where a run's folders live: a local path, or a pyarrow filesystem URI (``s3://bucket/prefix``,
``gs://``, ``hdfs://``, ``abfs://``, ``file:///abs/path``), as ``results_dir`` and ``generated_dir``
name them.

A file appears whole or not at all. It is made in memory first, then: on a local disk or HDFS,
written under a dot-name and renamed (every reader skips dot- and underscore-names); on an object
store, which has no rename, put once under its final name (unique: each writer names its own
files), and an object becomes visible only when its upload is complete.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pkb_ray.spec.config import ConfigError

FORMS = "a local path, file:///abs/path, s3://bucket/prefix, gs://bucket/prefix, hdfs://host:port/path"
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# no rename (or no atomic one) on these: a file is put once under its final name
_OBJECT_STORES = tuple(getattr(pafs, n) for n in ("S3FileSystem", "GcsFileSystem", "AzureFileSystem")
                       if hasattr(pafs, n))


def is_uri(target: str | Path) -> bool:
    return isinstance(target, str) and bool(_URI.match(target))


def is_remote(target: str | Path) -> bool:
    """Whether ``target`` is a URI of anything but the local filesystem (``file://`` is local)."""
    return is_uri(target) and not str(target).startswith("file://")


def local_path(target: str | Path) -> Path | None:
    """The local folder ``target`` names (a path, or a ``file://`` URI); None for a remote URI."""
    if not is_uri(target):
        return Path(target).expanduser()
    return Path(Folder.of(target).path) if not is_remote(target) else None


def sub_uri(target: str, *parts: str) -> str:
    """``target`` (a path or URI) with ``parts`` added to its path, before any ``?query``."""
    base, q, query = str(target).partition("?")
    return "/".join([base.rstrip("/"), *parts]) + q + query


@dataclass(frozen=True)
class Folder:
    """A folder on some filesystem: ``path`` as ``fs`` names it, ``uri`` as the user wrote it."""

    fs: pafs.FileSystem
    path: str
    uri: str

    @classmethod
    def of(cls, target: "str | Path | Folder") -> "Folder":
        """``target`` resolved once (an S3 or GCS client is made here): a Folder stays valid for a run."""
        if isinstance(target, Folder):
            return target
        if not is_uri(target):
            return cls(pafs.LocalFileSystem(), str(Path(target).expanduser().absolute()), str(target))
        fs, path = pafs.FileSystem.from_uri(str(target))
        return cls(fs, path.rstrip("/"), str(target))

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def join(self, *parts: str) -> str:
        return "/".join([self.path, *parts])

    def where(self, rel: str) -> str:
        """``rel`` under this folder as the user would name it (for messages)."""
        return f"{self.uri.split('?')[0].rstrip('/')}/{rel}"

    def files(self, suffix: str = "") -> list[str]:
        """Every file under the folder ending in ``suffix`` (paths relative to it, sorted), none where
        the folder does not exist; files or folders named ``.*`` or ``_*`` are not the data."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True, recursive=True))
        rel = [i.path[len(self.path):].lstrip("/") for i in infos if i.type == pafs.FileType.File]
        return sorted(r for r in rel if r.endswith(suffix) and not any(p[:1] in "._" for p in r.split("/")))

    def write_bytes(self, rel: str, data: bytes | pa.Buffer) -> str:
        """Write ``data`` to ``rel`` under the folder, whole or not at all; returns its path."""
        final = self.join(rel)
        parent, _, name = final.rpartition("/")
        if isinstance(self.fs, _OBJECT_STORES):
            target = final  # one put: visible when complete
        else:
            self.fs.create_dir(parent, recursive=True)
            target = f"{parent}/.{name}.tmp"
        out = self.fs.open_output_stream(target, compression=None)
        out.write(data)
        out.close()
        if target != final:
            self.fs.move(target, final)
        return final

    def write_table(self, rel: str, table: pa.Table) -> str:
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)  # serialized before anything is sent: a failure here leaves nothing behind
        return self.write_bytes(rel, buf.getvalue())

    def read_bytes(self, rel: str) -> bytes | None:
        """The bytes of ``rel`` under the folder; None where there is no such file."""
        path = self.join(rel)
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with self.fs.open_input_stream(path) as f:
            return f.read()

    def read_tables(self, suffix: str = ".parquet") -> list[pa.Table]:
        """Each Parquet file under the folder as it is (no partition columns from its path)."""
        out = []
        for rel in self.files(suffix):
            with self.fs.open_input_file(self.join(rel)) as f:
                out.append(pq.read_table(f))
        return out

    def upload(self, local_dir: Path, rel: str, names: Iterable[str] | None = None) -> list[str]:
        """Copy the files of ``local_dir`` (or only ``names``, relative to it) to ``rel`` under the folder."""
        local_dir = Path(local_dir)
        files = [local_dir / n for n in names] if names is not None else sorted(local_dir.rglob("*"))
        return [self.write_bytes(f"{rel}/{f.relative_to(local_dir).as_posix()}", f.read_bytes())
                for f in files if f.is_file()]


def check(target: str, key: str) -> Folder:
    """``target`` as a Folder this run can write, checked now: a URI pyarrow cannot open or that holds
    credentials, a bucket that does not exist or refuses a write fails the run at start (ConfigError
    naming ``key``). A local folder is made by the run itself."""
    if is_uri(target) and "@" in target.split("?")[0].partition("://")[2].split("/")[0]:
        raise ConfigError(f"{key}: credentials in the URI would be written to logs, Hydra's files and W&B; give "
                          "them in the environment (AWS_ACCESS_KEY_ID, GOOGLE_APPLICATION_CREDENTIALS, ...)")
    try:
        folder = Folder.of(target)
    except (ValueError, OSError, pa.ArrowException) as exc:
        raise ConfigError(f"{key}: cannot open {target!r} ({exc}); give {FORMS}") from None
    if folder.is_local:
        return folder
    probe = f".pkb_ray-probe-{uuid.uuid4().hex[:12]}"  # a dot-name: no reader counts it
    try:
        folder.write_bytes(probe, b"")
    except (OSError, pa.ArrowException) as exc:
        raise ConfigError(f"{key}: cannot write to {target} ({exc})") from None
    try:
        folder.fs.delete_file(folder.join(probe))
    except OSError:
        pass  # write-only credentials: a stray empty dot-file is harmless
    return folder
