"""MedCounterfact: clinical questions with original or substituted interventions, in four prompt variants.
Items and scoring: :mod:`.family`; prompts: :mod:`.prompts`; metrics: :mod:`.metrics`; report section:
:mod:`.report`; its own run (formats, label probabilities, mitigations, refine chain): :mod:`.pipelines`."""

from __future__ import annotations

from .family import CATEGORIES, GOLD_LABELS, KNOWN, VARIANTS, MedFamily, MedFormat, MedJudge, MedMitigation, MedSettings
from .prompts import render_med_prompt
