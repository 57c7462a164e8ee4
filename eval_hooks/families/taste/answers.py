"""Taste-Bench's answer vocabulary, owned by the family: the fork letters and the ``choice`` answer type
(registered in :data:`eval_hooks.parsers.BUILTIN`), read with the published runner's rule
(:func:`eval_hooks.parsers.choice.parse_fork_answer`)."""

from __future__ import annotations

from ...parsers.base import AnswerType
from ...parsers.choice import normalize_fork, parse_fork_answer

#: The two branches of a fork, as the runner's ``ANSWER: X`` line names them.
FORK_LETTERS = ("A", "B")

#: The ``choice`` answer type: a fork letter under the runner's rule, a gold one of :data:`FORK_LETTERS`.
FORK_ANSWER = AnswerType(
    "choice", parse=lambda text, choices, cands: parse_fork_answer(text, FORK_LETTERS),
    normalize=lambda value, choices=None: normalize_fork(value, FORK_LETTERS), accepted="A | B")
