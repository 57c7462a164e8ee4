"""Taste-Bench: decision forks asked in both orders. Items and scoring: :mod:`.family`; metrics:
:mod:`.metrics`; report section: :mod:`.report`."""

from __future__ import annotations

from .family import (CONSTRUCTIONS, DOMAINS, HEAD_LINES, MAX_PROMPT_TOKENS, TasteFamily, approx_tokens, fit_prompt,
                     omission_marker, prefix_text, render_taste_prompt, TasteSettings)
