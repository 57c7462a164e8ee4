"""Box2-Bench: workflow items expanded to the five frozen conditions. Items and scoring: :mod:`.family`;
metrics: :mod:`.metrics`; report section: :mod:`.report`."""

from __future__ import annotations

from .family import ANSWER_TYPES, KNOWN, PROMPT_STYLES, Box2Family, render_box2_prompt
