"""Where pkb_ray's own folders are: in a checkout, beside the package; in an installed wheel,
inside it (``pkb_ray/_data``, where the wheel carries conf/, problems/, kernels/, baselines/ and
the replay samples; see pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
CODE_ROOT = PACKAGE.parent  # the folder holding the pkb_ray package (children's sys.path)
_CHECKOUT = CODE_ROOT
_SHIPPED = PACKAGE / "_data"

# A checkout has conf/ beside the package; an installed wheel has its copy inside the package.
DATA_ROOT = _CHECKOUT if (_CHECKOUT / "conf" / "config.yaml").is_file() else _SHIPPED
CONF_DIR = DATA_ROOT / "conf"
PROBLEMS_DIR = DATA_ROOT / "problems"
KERNELS_DIR = DATA_ROOT / "kernels"
