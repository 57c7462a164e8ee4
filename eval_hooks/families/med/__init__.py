"""MedCounterfact: clinical questions with original or substituted interventions, in four prompt variants.
Items and scoring: :mod:`.family`; prompts: :mod:`.prompts`; metrics: :mod:`.metrics`; report section:
:mod:`.report`; its own run (formats, label probabilities, mitigations, refine chain): :mod:`.pipelines`; items made
from MedEvidence records (the builder's and a raw ``eval.path``'s): :mod:`.items`, with :mod:`.grammar` (the
question's intervention and its aliases), :mod:`.terms` (the substitution term lists, ``term_lists/``) and
:mod:`.verify` (the independent check of a substitution)."""

from __future__ import annotations

from .family import CATEGORIES, GOLD_LABELS, KNOWN, VARIANTS, MedFamily, MedFormat, MedJudge, MedMitigation, MedSettings
from .prompts import render_med_prompt
