"""The reference store: every kind of tampering a candidate could do to the cache is caught."""

import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pkb_ray.cache import DEFAULT_CACHE_DIR
from pkb_ray.reference_store import MANIFEST, ReferenceStore, TamperedReference

REPO = Path(__file__).resolve().parent.parent
KEY = json.dumps(["allreduce_sum", "0" * 64, 2, "float32", [["n", 1024]], [0, 1], "cpu", "2.13.0"])
OUTPUTS = {"seed0.rank0.pt": b"\x01" * 100, "seed0.rank1.pt": b"\x02" * 100, "seed1.rank0.pt": b"\x03" * 50}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # never the real ~/.config, whatever a test forgets
    return ReferenceStore(tmp_path / "cache" / "references", key_file=tmp_path / "home" / "cache.key")


def commit(store: ReferenceStore, key: str = KEY, outputs: dict = OUTPUTS) -> Path:
    staged = store.staging()
    for name, data in outputs.items():
        (staged / name).write_bytes(data)
    return store.commit(key, staged)


def test_commit_then_lookup(store):
    entry = commit(store)
    assert entry == store.entry(KEY) and store.lookup(KEY) == entry
    assert {name: store.read_verified(entry, name) for name in OUTPUTS} == OUTPUTS
    assert [p.name for p in store.root.iterdir()] == [entry.name]  # the staging folder became the entry
    assert store.lookup(KEY.replace("float32", "bfloat16")) is None


def test_zeroed_output_is_discarded_and_logged(store, caplog):
    entry = commit(store)
    (entry / "seed0.rank1.pt").write_bytes(b"\x00" * 100)
    with caplog.at_level(logging.WARNING, logger="pkb_ray.reference_store"):
        assert store.lookup(KEY) is None
    assert not entry.exists() and list(store.root.iterdir()) == []  # nothing moved aside is left either
    assert "seed0.rank1.pt: sha256 differs from manifest" in caplog.text and "allreduce_sum" in caplog.text


@pytest.mark.parametrize("how", ["rewrite", "replace", "touch_back"])
def test_an_entry_hashed_once_is_hashed_again_only_when_a_file_changes(store, caplog, how):
    import time

    entry = commit(store)
    time.sleep(1.2)  # older than SETTLE_S: a later write gets another change time
    assert store.lookup(KEY) == entry and store.lookup(KEY) == entry and store.full_checks == 1
    target = entry / "seed0.rank1.pt"
    before = target.stat()
    if how == "rewrite":  # same size, in place
        with open(target, "r+b") as f:
            f.write(b"\x00" * 100)
    elif how == "replace":  # a new inode under the old name
        other = entry / "x.tmp"
        other.write_bytes(b"\x00" * 100)
        os.replace(other, target)
    else:  # rewritten, with size and modification time put back as they were
        target.write_bytes(b"\x00" * 100)
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    with caplog.at_level(logging.WARNING, logger="pkb_ray.reference_store"):
        assert store.lookup(KEY) is None
    assert store.full_checks == 2 and "seed0.rank1.pt: sha256 differs from manifest" in caplog.text


def test_rehashed_manifest_without_the_key_is_caught(store, caplog):
    # what an attacker who can write the cache but not read the key would do
    entry = commit(store)
    (entry / "seed0.rank0.pt").write_bytes(b"\x00" * 100)
    manifest = json.loads((entry / MANIFEST).read_text())
    manifest["files"]["seed0.rank0.pt"] = hashlib.sha256(b"\x00" * 100).hexdigest()
    (entry / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1))
    with caplog.at_level(logging.WARNING, logger="pkb_ray.reference_store"):
        assert store.lookup(KEY) is None
    assert "manifest.mac" in caplog.text and not entry.exists()


@pytest.mark.parametrize("change", ["extra", "missing", "symlink"])
def test_extra_missing_or_linked_file(store, change, caplog):
    entry = commit(store)
    target = entry / "seed0.rank0.pt"
    if change == "extra":
        (entry / "seed9.rank0.pt").write_bytes(b"")
    elif change == "missing":
        target.unlink()
    else:  # same bytes, but a link a writer could retarget after the check
        outside = store.root.parent / "elsewhere.pt"
        outside.write_bytes(target.read_bytes())
        target.unlink()
        target.symlink_to(outside)
    with caplog.at_level(logging.WARNING, logger="pkb_ray.reference_store"):
        assert store.lookup(KEY) is None
    assert {"extra": "seed9.rank0.pt: not in manifest", "missing": "seed0.rank0.pt: missing",
            "symlink": "seed0.rank0.pt: not a plain file"}[change] in caplog.text


def test_partial_or_pre_manifest_entry(store):
    entry = store.entry(KEY)  # the old cache's layout: outputs and a `complete` marker, no manifest
    entry.mkdir(parents=True)
    (entry / "seed0.rank0.pt").write_bytes(b"\x01")
    (entry / "complete").write_text(KEY)
    assert store.lookup(KEY) is None and not entry.exists()
    assert store.lookup(KEY) is None  # and nothing at all: no error
    assert commit(store) == entry and store.lookup(KEY) == entry


def test_signed_entry_of_another_key_is_refused(store):
    # copying a valid entry (say, other seeds) over this key's folder: the MAC holds, the key does not
    other = commit(store, KEY.replace("[0, 1]", "[2, 3]"), {n: b"\x00" * 100 for n in OUTPUTS})
    entry = commit(store)
    assert store.lookup(KEY) == entry
    shutil.rmtree(entry)
    shutil.copytree(other, entry)
    with pytest.raises(TamperedReference, match="signed for another key"):
        store.read_verified(entry, "seed0.rank0.pt")
    assert store.lookup(KEY) is None and store.lookup(KEY.replace("[0, 1]", "[2, 3]")) == other


def test_read_verified_catches_changes_after_lookup(store):
    entry = commit(store)
    assert store.lookup(KEY) == entry
    (entry / "seed1.rank0.pt").write_bytes(b"\x00" * 50)  # between the check and the use
    with pytest.raises(TamperedReference) as caught:
        store.read_verified(entry, "seed1.rank0.pt")
    assert caught.value.name == "seed1.rank0.pt" and "sha256 differs" in caught.value.detail
    assert store.read_verified(entry, "seed0.rank0.pt") == OUTPUTS["seed0.rank0.pt"]
    (entry / "seed0.rank0.pt").unlink()
    with pytest.raises(TamperedReference, match="missing"):
        store.read_verified(entry, "seed0.rank0.pt")
    with pytest.raises(TamperedReference, match="not in manifest"):
        store.read_verified(entry, "seed5.rank0.pt")


def test_concurrent_commits_of_one_key(store):
    for _ in range(5):
        stagings = []
        for i in range(4):  # each writer's outputs differ, so we can tell whose entry won
            staged = store.staging()
            (staged / "seed0.rank0.pt").write_bytes(bytes([i]) * 10)
            stagings.append(staged)
        start, results = threading.Barrier(len(stagings)), []

        def run(staged):
            start.wait()
            results.append(store.commit(KEY, staged))

        threads = [threading.Thread(target=run, args=(s,)) for s in stagings]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        entry = store.entry(KEY)
        assert results == [entry] * len(stagings)
        assert [p.name for p in store.root.iterdir()] == [entry.name]  # losers' stagings removed
        assert store.lookup(KEY) == entry
        assert store.read_verified(entry, "seed0.rank0.pt") in {bytes([i]) * 10 for i in range(4)}
        shutil.rmtree(entry)


def test_commit_replaces_a_tampered_entry(store):
    entry = commit(store)
    (entry / "seed0.rank0.pt").write_bytes(b"")
    assert commit(store) == entry and store.lookup(KEY) == entry
    assert store.read_verified(entry, "seed0.rank0.pt") == OUTPUTS["seed0.rank0.pt"]


def test_key_file(tmp_path):
    key_file = tmp_path / "config" / "pkb_ray" / "cache.key"
    root = tmp_path / "references"
    entry = commit(ReferenceStore(root, key_file))
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(key_file.read_bytes()) == 32
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    before = key_file.read_bytes()
    assert ReferenceStore(root, key_file).lookup(KEY) == entry  # reused, not regenerated
    assert key_file.read_bytes() == before
    assert ReferenceStore(root, tmp_path / "other.key").lookup(KEY) is None  # another key: not ours
    assert not entry.exists()


def test_racing_key_creation_agrees(tmp_path):
    key_file = tmp_path / "cfg" / "cache.key"
    stores = [ReferenceStore(tmp_path / "refs", key_file) for _ in range(8)]
    start, macs = threading.Barrier(len(stores)), []

    def run(s):
        start.wait()
        macs.append(s._mac(b"x"))

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(macs)) == 1 and [p.name for p in key_file.parent.iterdir()] == ["cache.key"]


def test_default_cache_dir_is_the_configs():
    from pkb_ray.config import SweepConfig
    assert SweepConfig.model_fields["cache_dir"].default == DEFAULT_CACHE_DIR


def test_cli(tmp_path):
    home, cache = tmp_path / "home", tmp_path / "cache"
    store = ReferenceStore(cache / "references", home / ".config" / "pkb_ray" / "cache.key")  # the CLI's default
    entry = commit(store)
    commit(store, KEY.replace("float32", "float16"))
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(REPO))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "pkb_ray.cache", *args, "--cache-dir", str(cache)],
                              env=env, capture_output=True, text=True, timeout=60)

    clean = cli("verify")
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.count("ok ") == 2 and "(allreduce_sum)" in clean.stdout and "TAMPERED" not in clean.stdout
    (entry / "seed0.rank1.pt").write_bytes(b"\x00" * 100)
    bad = cli("verify")
    assert bad.returncode == 1 and "TAMPERED" in bad.stdout and "seed0.rank1.pt: sha256 differs" in bad.stdout
    assert entry.exists()  # verify alone changes nothing
    fixed = cli("verify", "--fix")
    assert fixed.returncode == 1 and not entry.exists()
    assert cli("verify").returncode == 0
    cleared = cli("clear")
    assert cleared.returncode == 0 and "removed 1 entries" in cleared.stdout
    assert list((cache / "references").iterdir()) == []
