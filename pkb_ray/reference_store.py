"""Reference outputs on disk, stored so that tampering is detected rather than believed.

Candidate code runs as the same user as the evaluator. It is sandboxed (read-only filesystem, the
cache hidden), but the sandbox can be turned off and caches are shared, so a candidate may be able
to rewrite cached reference outputs (say, with zeros) and make every later verdict of that problem
wrong. Hence:

* only rank sets that never imported a candidate write outputs, into :meth:`ReferenceStore.staging`;
* :meth:`~ReferenceStore.commit` records every file's sha256 in ``manifest.json`` and an
  HMAC-SHA256 of that manifest in ``manifest.mac``, then renames the folder into place atomically;
* :meth:`~ReferenceStore.lookup` checks all of it; a bad entry is discarded and logged, so the
  caller regenerates it. Hashing hundreds of MB per sample cost seconds, so an entry whose files
  this store verified in full, and whose inodes, sizes and change times (``st_ctime``, which no
  write can leave as it was and no unprivileged process can set) are still the same, is not hashed
  again; :meth:`~ReferenceStore.read_verified` and the clean ranks check each file's hash again
  at the time they read it.

The HMAC key lives outside the cache (``~/.config/pkb_ray/cache.key``), where the sandbox hides
it: code that can write the cache can rewrite files and their hashes, but cannot sign a manifest.
Files are opaque bytes here; this module needs neither torch nor Ray.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("pkb_ray.reference_store")

MANIFEST = "manifest.json"
MAC = "manifest.mac"
KEY_BYTES = 32
STALE_STAGING_S = 3600  # clear() leaves younger staging folders alone: a running sweep may be writing them
# a file changed within this many seconds of a full check is hashed again at the next lookup: change
# times tick with the kernel's coarse clock, so a write just after the check could keep the same one
SETTLE_S = 1.0
_ENTRY_NAME = re.compile(r"[0-9a-f]{24}")


def default_key_file() -> Path:
    return Path.home() / ".config" / "pkb_ray" / "cache.key"


class TamperedReference(RuntimeError):
    """A stored reference file does not match its signed manifest."""

    def __init__(self, entry: Path, name: str, detail: str):
        super().__init__(f"{entry}: {name}: {detail}")
        self.entry, self.name, self.detail = entry, name, detail


@dataclass
class EntryReport:
    path: Path
    key: str | None  # as the manifest says; untrusted when ok is False
    ok: bool
    problem: str  # "" or "<file>: <what is wrong>"


class ReferenceStore:
    def __init__(self, root: Path, key_file: Path | None = None):
        self.root = Path(root)
        self.key_file = Path(key_file) if key_file is not None else default_key_file()
        self._key: bytes | None = None
        self._verified: dict[Path, tuple] = {}  # entry -> its files' stat signature at a full check
        self.full_checks = 0

    # -- the public surface ------------------------------------------------------------------

    def entry(self, key: str) -> Path:
        return self.root / hashlib.sha256(key.encode()).hexdigest()[:24]

    def lookup(self, key: str) -> Path | None:
        """The entry for ``key`` if it exists and verifies; otherwise None (a bad one is discarded)."""
        entry = self.entry(key)
        if not os.path.lexists(entry):
            return None
        known = self._verified.get(entry)
        if known is not None and known == _signature(entry):
            return entry  # nothing in it changed since it was hashed in full
        self._verified.pop(entry, None)
        problem = self._problem(entry)
        self.full_checks += 1
        if not problem:
            signature = _signature(entry)
            if signature is not None and time.time_ns() - max(s[-1] for s in signature) > SETTLE_S * 1e9:
                self._verified[entry] = signature
            return entry
        log.warning("reference entry %s for key %s failed verification (%s); discarded, it will be "
                    "regenerated", entry.name, key, problem)
        try:
            self.discard(entry)
        except OSError as e:  # e.g. another user's folder: commit() will report it
            log.warning("could not discard %s: %s", entry, e)
        return None

    def staging(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="tmp-", dir=self.root))  # same filesystem: rename is atomic

    def commit(self, key: str, staged: Path) -> Path:
        """Sign ``staged`` and move it to ``entry(key)``; a valid entry already there wins."""
        staged, entry = Path(staged), self.entry(key)
        files = {}
        for item in sorted(os.scandir(staged), key=lambda i: i.name):
            if item.name in (MANIFEST, MAC) or not item.is_file(follow_symlinks=False):
                raise ValueError(f"{item.path}: a staging folder holds only plain output files")
            files[item.name] = _sha256_file(Path(item.path))
        manifest = json.dumps({"key": key, "files": files}, sort_keys=True, indent=1).encode()
        (staged / MANIFEST).write_bytes(manifest)
        (staged / MAC).write_bytes(self._mac(manifest).encode())
        for _ in range(3):
            try:
                os.rename(staged, entry)  # atomic; fails if entry is a non-empty folder
                return entry
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
            problem = self._problem(entry)
            if not problem:  # another process committed the same outputs first
                shutil.rmtree(staged, ignore_errors=True)
                return entry
            log.warning("replacing reference entry %s for key %s: %s", entry.name, key, problem)
            self.discard(entry)
        raise RuntimeError(f"could not install {staged} as {entry}: it keeps being replaced")

    def read_verified(self, entry: Path, name: str) -> bytes:
        """One file's bytes, checked against the signed manifest as they are read (not earlier)."""
        entry = Path(entry)
        try:
            _, files = self._manifest(entry)
            if name not in files:
                raise TamperedReference(entry, name, "not in manifest")
            data = (entry / name).read_bytes()
        except FileNotFoundError:
            raise TamperedReference(entry, name, "missing") from None
        except OSError as e:  # one exception for the caller: whatever it is, we cannot vouch for it
            raise TamperedReference(entry, name, e.strerror or str(e)) from None
        if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), files[name]):
            raise TamperedReference(entry, name, "sha256 differs from manifest")
        return data

    def hashes(self, entry: Path) -> dict[str, str]:
        """File name -> sha256 from the entry's manifest (MAC-checked): for readers in other
        processes, which check each file against it as they read it."""
        return dict(self._manifest(Path(entry))[1])

    def verify_all(self) -> list[EntryReport]:
        reports = []
        for entry in self._entries():
            problem = self._problem(entry)
            reports.append(EntryReport(entry, _claimed_key(entry), not problem, problem))
        return reports

    def discard(self, entry: Path) -> None:
        """Remove an entry; moved aside first, so no reader ever sees it half deleted."""
        aside = self.root / f"bad-{os.urandom(6).hex()}"
        try:
            os.rename(entry, aside)
        except FileNotFoundError:  # someone else discarded it already
            return
        _remove(aside)

    def clear(self) -> int:
        """Remove every entry and leftover (not staging folders a running sweep may still fill)."""
        if not self.root.is_dir():
            return 0
        removed = 0
        for item in self.root.iterdir():
            if item.name.startswith("tmp-") and time.time() - item.lstat().st_mtime < STALE_STAGING_S:
                continue
            removed += bool(_ENTRY_NAME.fullmatch(item.name))
            _remove(item)
        return removed

    # -- verification ------------------------------------------------------------------------

    def _problem(self, entry: Path) -> str:
        """"" if ``entry`` is complete and intact, else what is wrong ("<file>: <reason>")."""
        try:
            if entry.is_symlink() or not entry.is_dir():
                raise TamperedReference(entry, entry.name, "not a plain folder")
            _, files = self._manifest(entry)  # whose key it is follows from the folder's name
            present = {i.name: i for i in os.scandir(entry)}
            extra = sorted(present.keys() - files.keys() - {MANIFEST, MAC})
            if extra:
                raise TamperedReference(entry, extra[0], "not in manifest")
            for name, digest in sorted(files.items()):
                if name not in present:
                    raise TamperedReference(entry, name, "missing")
                if not present[name].is_file(follow_symlinks=False):
                    raise TamperedReference(entry, name, "not a plain file")
                if not hmac.compare_digest(_sha256_file(entry / name), digest):
                    raise TamperedReference(entry, name, "sha256 differs from manifest")
        except TamperedReference as e:
            return f"{e.name}: {e.detail}"
        except OSError as e:  # unreadable counts as bad: we cannot vouch for it
            return f"{Path(e.filename or entry).name}: {e.strerror}"
        return ""

    def _manifest(self, entry: Path) -> tuple[str, dict[str, str]]:
        """The manifest's (key, files) once its MAC and the folder's name check out; else TamperedReference."""
        try:
            manifest, mac = (entry / MANIFEST).read_bytes(), (entry / MAC).read_bytes()
        except FileNotFoundError as e:  # a partial entry, or one from before manifests
            raise TamperedReference(entry, Path(e.filename).name, "missing") from None
        if not hmac.compare_digest(self._mac(manifest).encode(), mac.strip()):
            raise TamperedReference(entry, MAC, "HMAC does not match the manifest (forged, or another key)")
        body = json.loads(manifest)
        key, files = body["key"], body["files"]
        # the MAC covers the key, and the folder name is the key's hash: a signed entry copied
        # over another key's folder is caught here, in read_verified() as well as lookup()
        if entry.name != hashlib.sha256(key.encode()).hexdigest()[:24]:
            raise TamperedReference(entry, MANIFEST, "signed for another key")
        return key, files

    def _mac(self, data: bytes) -> str:
        if self._key is None:
            self._key = _load_key(self.key_file)
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()

    def _entries(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if _ENTRY_NAME.fullmatch(p.name))


def _load_key(path: Path) -> bytes:
    """The secret, created on first use (0600 in a 0700 folder); racing creators agree on one."""
    if not path.exists():
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".key-", dir=path.parent)  # mkstemp makes it 0600
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
            os.close(fd)
            try:
                os.link(tmp, path)  # appears whole or not at all, and never replaces a key
            except FileExistsError:  # another process won: its key is the key
                pass
        finally:
            os.unlink(tmp)
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise ValueError(f"{path}: expected a {KEY_BYTES}-byte key, found {len(key)} bytes")
    return key


def _claimed_key(entry: Path) -> str | None:
    try:
        key = json.loads((entry / MANIFEST).read_bytes())["key"]
        return key if isinstance(key, str) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _signature(entry: Path) -> tuple | None:
    """(name, inode, size, mtime, ctime) of the folder and each item in it; None if unreadable."""
    try:
        items = [(".", os.lstat(entry))] + sorted((i.name, i.stat(follow_symlinks=False)) for i in os.scandir(entry))
    except OSError:
        return None
    return tuple((name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for name, st in items)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
