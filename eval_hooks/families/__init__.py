"""The four benchmark families: how items are validated and expanded into rows, and how rows are scored.

``FAMILIES[name]`` is a :class:`~eval_hooks.families.base.Family` with ``expand_records`` (items ->
rows, validated), ``validate_rows`` (a rows file written by ``expand``, read back) and ``score_row``.
Input formats are documented in ``eval_hooks/FORMATS.md``.
"""

from __future__ import annotations

from .base import Family
from .box2 import Box2Family
from .med import MedFamily
from .mist import MistFamily
from .taste import TasteFamily

FAMILIES: dict[str, Family] = {f.name: f for f in (MistFamily(), Box2Family(), TasteFamily(), MedFamily())}


def get_family(name: str) -> Family:
    from ..io import DataError

    try:
        return FAMILIES[name]
    except KeyError:
        raise DataError(f"unknown family {name!r}", field="family", accepted=" | ".join(FAMILIES)) from None


__all__ = ["FAMILIES", "Family", "get_family", "MistFamily", "Box2Family", "TasteFamily", "MedFamily"]
