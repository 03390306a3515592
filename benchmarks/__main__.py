"""python -m benchmarks --list | NAME [ARGS...] | NAME --help"""

from __future__ import annotations

import sys

from benchmarks import registry

USAGE = "usage: python -m benchmarks --list | NAME [ARGS...] | NAME --help"


def listing() -> str:
    table = registry.names()
    width = max(map(len, table))
    return "\n".join(f"{name:{width}}  {text}" for name, text in table.items())


def main(argv: list[str]) -> int:
    if argv[:1] in (["--list"], ["-l"]):
        print(listing())
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{USAGE}\n\nEach writes JSON under docs/benchmarks/data (or --out); benchmarks/README.md.\n\n{listing()}")
        return 0 if argv else 2
    return registry.run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
