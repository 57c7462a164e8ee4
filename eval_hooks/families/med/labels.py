"""MedCounterfact's answer vocabulary, owned by the family: the four labels and the ``label`` answer type
(registered in :data:`eval_hooks.parsers.BUILTIN`), read with the generic label reader of
:mod:`eval_hooks.parsers.choice`."""

from __future__ import annotations

from ...parsers.base import AnswerType
from ...parsers.choice import normalize_label, parse_label

#: The labels a MedCounterfact answer can take, in scoring order (``score_labels``, the label probabilities).
MED_LABELS = ("Higher", "Lower", "No Difference", "Uncertain")

#: The ``label`` answer type: the last label a response names (:func:`parse_label`), a gold one of :data:`MED_LABELS`.
LABEL_ANSWER = AnswerType(
    "label", parse=lambda text, choices, cands: parse_label(text),
    normalize=lambda value, choices=None: normalize_label(value, MED_LABELS), accepted="Higher | Lower | No Difference")
