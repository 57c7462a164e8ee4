"""MIST (SCOPE): quartets of one question under four contexts. Items and scoring: :mod:`.family`;
metrics: :mod:`.metrics`; report section: :mod:`.report`."""

from __future__ import annotations

from .family import ANSWER_TYPES, CONDITIONS, MATCHED_FIELDS, MistFamily
