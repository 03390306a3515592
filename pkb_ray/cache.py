"""The reference cache from the command line.

    python -m pkb_ray.cache verify [--cache-dir DIR] [--fix]   # check every entry; exit 1 if any is bad
    python -m pkb_ray.cache clear  [--cache-dir DIR]           # remove every entry

DIR defaults to the sweep's ``cache_dir``; reference outputs are under DIR/references.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pkb_ray.reference_store import EntryReport, ReferenceStore

DEFAULT_CACHE_DIR = "~/.cache/pkb_ray"  # = pkb_ray.config.SweepConfig.cache_dir (tests/test_reference_store.py checks)


def label(report: EntryReport) -> str:
    """The entry's folder name, and its problem id where the key is a JSON list led by one."""
    try:
        first = json.loads(report.key)[0]
    except (TypeError, ValueError, KeyError, IndexError):
        first = None
    return report.path.name + (f" ({first})" if isinstance(first, str) else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pkb_ray.cache", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check every entry's hashes and signature")
    verify.add_argument("--fix", action="store_true", help="remove bad entries (they are regenerated on use)")
    clear = commands.add_parser("clear", help="remove every entry")
    for command in (verify, clear):
        command.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help=f"default: {DEFAULT_CACHE_DIR}")
    args = parser.parse_args(argv)
    store = ReferenceStore(Path(args.cache_dir).expanduser() / "references")

    if args.command == "clear":
        print(f"removed {store.clear()} entries from {store.root}")
        return 0
    reports = store.verify_all()
    bad = [r for r in reports if not r.ok]
    for r in reports:
        print(f"ok        {label(r)}" if r.ok else f"TAMPERED  {label(r)}: {r.problem}")
        if not r.ok and args.fix:
            store.discard(r.path)
    print(f"{len(reports)} entries, {len(bad)} bad" + (", removed" if bad and args.fix else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
