"""How long each test file took in a whole run, for ordering the next (tests/conftest.py).

    ./scripts/test.sh --junitxml=/tmp/suite.xml
    .venv/bin/python tests/file_seconds.py /tmp/suite.xml     # rewrites tests/file_seconds.json

Under pytest-xdist's ``--dist loadfile`` a free worker takes the next file in collection order; with
the longest files first, no worker is left running a long file alone at the end.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).with_name("file_seconds.json")
UNKNOWN_S = 20.0  # a file not in the table (new since): in the middle, neither first nor last


def load() -> dict[str, float]:
    return json.loads(TABLE.read_text()) if TABLE.exists() else {}


def from_junit(path: str) -> dict[str, float]:
    """tests/<file>.py -> seconds, summed over its test cases (setup and teardown included)."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        parts = []
        for part in module:  # tests.unit.test_x[.Class] -> tests/unit/test_x.py
            parts.append(part)
            if part.startswith("test_"):
                break
        seconds["/".join(parts) + ".py"] += float(case.get("time") or 0.0)
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    TABLE.write_text(json.dumps(from_junit(sys.argv[1]), indent=1) + "\n")
    print(f"{TABLE}: {len(load())} files")
