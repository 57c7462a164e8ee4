"""Where the Hydra config groups are: the repository's top-level ``conf/`` in a checkout, ``selectrust/conf/`` in an
installed wheel (``setup.py`` copies ``conf/`` there at build time, so the repository keeps its layout).

Every entry point composes from :data:`CONF_DIR` (the recipes' ``@hydra.main(config_path=...)``, ``--help``, the stage
runner's ``compose``), so a checkout, an editable install and a wheel installed anywhere compose the same files."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve()
PACKAGED = _HERE.parents[1] / "conf"    # site-packages/selectrust/conf: the wheel's copy
CHECKOUT = _HERE.parents[2] / "conf"    # <repository>/conf: only trusted when selectrust/ is the checkout's own


def conf_dir() -> Path:
    """The packaged copy when there is one (in site-packages, ``parents[2] / "conf"`` would be some other
    distribution's), else the checkout's ``conf/``."""
    return PACKAGED if PACKAGED.is_dir() else CHECKOUT


CONF_DIR = conf_dir()
