"""Type-aware final-answer parsers. Deterministic exact match after parsing, never fuzzy prose matching.

Every parser takes a free-text response and returns the canonical string form of its final answer,
or ``None`` when there is none (an unparsable response counts as wrong, and is counted separately).
No input string can make a parser raise.

Rule shared by all parsers: **the last final answer wins**. A *final-answer marker* is one of
``\\boxed{...}``, ``#### X``, ``... answer is X``, ``Answer: X`` / ``Final answer: X`` /
``ANSWER: X`` (any case, Markdown bold allowed). Markers are tried from the last to the first; the
first one whose text parses gives the answer. Only when no marker parses does a parser fall back to
a type-specific guess (the last number; a bare letter, option text or label as the whole response or
its last line; a leading yes/no).

Canonical forms:
- numeric: an integer (``"18"``), an exact decimal (``"0.25"``) or a reduced fraction (``"1/3"``),
  with a trailing ``%`` if the answer was written as a percent. Read: ``3/4``, ``-3/4``,
  ``\\frac{3}{4}``, ``\\dfrac34``, mixed numbers ``1 1/2`` / ``1\\frac{1}{2}``, ``40%`` (equal to a gold
  of 40, and of 0.4), scientific ``1.2e4`` / ``1.2 \\times 10^{4}``, the Unicode minus ``−``;
- multiple_choice: the option letter (``"B"``); boolean: ``"true"`` / ``"false"``;
- fork (Taste, the published runner's stricter rule, see ``parse_fork_answer``): ``"A"`` / ``"B"``; label (Med): ``Higher | Lower | No Difference | Uncertain``;
- short_text (a name: a city, a country): the normalised name the response's claims commit to
  (``normalize_short_text``), or None for no answer, a hedge (two answers offered with "or": status ``hedged``) and
  several answers (status ``multiple``); the response is read as claims, one per clause (:mod:`.claims`); see
  ``read_short_text`` for the rule, eval_hooks/FORMATS.md for it in full.

The answer types are a registry, :data:`ANSWER_TYPES` (an :class:`selectrust.core.plugins.Registry` of
:class:`AnswerType`): each entry holds its parser, its normaliser and comparison, its "same answer" check, its
candidates (what counts as ``candidate`` in :func:`answer_status`), the text that describes a valid gold, its
generation budget, its leak check (:func:`eval_hooks.builders.workflows.leaked_answer`) and, for families that write
prompts, its answer instruction. ``parse_answer``, ``normalize_gold``, ``answers_match``, ``answer_status``,
``answer_budget`` and ``answer_instruction`` only look an entry up, so a new answer type is one entry
(docs/architecture.md#how-to-add): a line of :data:`BUILTIN` (``name -> AnswerType``, imported here), a call of
:func:`register_answer_type`, or an entry point of the group ``selectrust.answer_types`` of an installed package::

    [project.entry-points."selectrust.answer_types"]
    colour = "mypackage.colour:COLOUR"        # an AnswerType named "colour"

An unknown name is a :class:`~selectrust.core.errors.DataError` naming it and the known ones.

Modules: :mod:`.markers` (final-answer markers, shared helpers), :mod:`.numeric`, :mod:`.choice` (multiple choice,
boolean, Taste's fork letter and Med's label, with their letters and labels), :mod:`.short_text` with :mod:`.claims`
(a response read as claims, one per clause), :mod:`.sentences` and :mod:`.answer_space`, :mod:`.base`
(:class:`AnswerType`). This package imports nothing of eval_hooks above it (docs/architecture.md#eval_hooks-in-rooms):
the families import their answer types from here.
"""

from __future__ import annotations

from typing import Any, Sequence

from selectrust.core.errors import DataError
from selectrust.core.plugins import Registry
from .base import ANSWER_LINE, REASONING_ANSWER_BUDGET, AnswerType, Candidates
from .choice import (BOOLEAN, FORK_ANSWER, FORK_LETTERS, LABEL_ANSWER, MED_LABELS, MULTIPLE_CHOICE, boolean_leak,
                     choice_leak, choice_letters, choice_texts, normalize_boolean_gold, normalize_choice_gold,
                     normalize_fork, normalize_label, parse_boolean, parse_fork_answer, parse_label,
                     parse_multiple_choice)
from .markers import final_answer_spans
from .numeric import (MAX_DIGITS, NUMERIC, Number, format_fraction, iter_numbers, normalize_number, numbers_equal,
                      numeric_leak, numeric_match, parse_number, parse_numeric)
from .open_answer import OPEN_ANSWER
from .sentences import STOP_WORDS, normalize_short_text
from .short_text import (SHORT_TEXT, ShortTextReading, normalize_short_text_value, parse_short_text, read_short_text,
                         short_text_unanswered)

__all__ = [
    "ANSWER_LINE", "ANSWER_TYPES", "BUILTIN", "ENTRY_POINT_GROUP", "FORK_LETTERS", "MAX_DIGITS", "MED_LABELS",
    "REASONING_ANSWER_BUDGET", "STOP_WORDS", "AnswerType", "Candidates", "Number", "ShortTextReading",
    "answer_budget", "answer_candidates", "answer_flags", "answer_instruction", "answer_status", "answer_type", "answers_match",
    "boolean_leak", "choice_leak", "choice_letters", "choice_texts", "final_answer_spans", "format_fraction",
    "iter_numbers",
    "normalize_boolean_gold", "normalize_choice_gold", "normalize_fork", "normalize_gold", "normalize_label",
    "normalize_number", "normalize_short_text", "normalize_short_text_value", "numbers_equal", "numeric_leak",
    "numeric_match", "parse_answer", "parse_boolean", "parse_fork_answer", "parse_label", "parse_multiple_choice",
    "parse_number", "parse_numeric", "parse_row_answer", "parse_short_text", "read_short_text",
    "register_answer_type", "row_answer_matches", "short_text_matches", "short_text_unanswered",
    "unregister_answer_type"]

# -- answer types: the registry ---------------------------------------------------------------------------

#: The entry-point group of installed packages' answer types (each entry point names an :class:`AnswerType`).
ENTRY_POINT_GROUP = "selectrust.answer_types"

#: The built-in answer types, one line each, in this order: name -> its :class:`AnswerType`.
BUILTIN: dict[str, AnswerType] = {
    "multiple_choice": MULTIPLE_CHOICE,
    "numeric": NUMERIC,
    "boolean": BOOLEAN,
    "choice": FORK_ANSWER,  # Taste's fork letter
    "label": LABEL_ANSWER,  # Med's label
    "short_text": SHORT_TEXT,
    "open_answer": OPEN_ANSWER,  # NQ-Swap's open-domain short answers
}


def _accept(name: str, entry: object) -> AnswerType:
    """What a built-in line or an entry point names: an :class:`AnswerType` called ``name``."""
    if not isinstance(entry, AnswerType) or entry.name != name:
        raise DataError(f"answer_type {name!r}: not an AnswerType named {name!r} (got {entry!r})")
    return entry


#: name -> :class:`AnswerType`: the only code that knows which answer types exist and what each one is.
ANSWER_TYPES: Registry[AnswerType] = Registry(
    "answer_type", ENTRY_POINT_GROUP, BUILTIN, accept=_accept, error=DataError, component=AnswerType,
    unknown=lambda name, known: DataError(f"unknown answer_type {name!r}; accepted: {', '.join(known)}"))

#: ``register_answer_type(entry)``: make ``entry`` available under ``entry.name`` (the same entry again is a no-op;
#: another under a name in use is an error); ``unregister_answer_type(name)`` removes it (tests, notebooks);
#: ``answer_type(name)``: the :class:`AnswerType` called ``name``, :class:`DataError` naming it and the accepted ones
#: otherwise.
register_answer_type, unregister_answer_type, answer_type = (ANSWER_TYPES.add, ANSWER_TYPES.unregister,
                                                             ANSWER_TYPES.get)


def parse_answer(text: str, answer_type_name: str, *, choices: Any = None,
                 candidates: Sequence[str] = ()) -> str | None:
    """Canonical final answer of ``text`` for the answer type (see module docstring), or ``None``. ``candidates``:
    the known answers of a short_text row (:func:`answer_candidates`)."""
    return answer_type(answer_type_name).parse(text, choices, candidates)


def normalize_gold(gold: Any, answer_type_name: str, *, choices: Any = None) -> str | None:
    """Canonical form of a gold (or wrong) value, or ``None`` if it is not valid for the answer type."""
    return answer_type(answer_type_name).normalize(gold, choices)


def answers_match(parsed: str | None, gold: Any, answer_type_name: str, *, choices: Any = None,
                  aliases: Sequence[str] | None = None) -> bool:
    """Whether a parsed answer (canonical string) equals ``gold`` (or, for a type with aliases, one of
    ``aliases``); ``None`` never matches."""
    if parsed is None:
        return False
    t = answer_type(answer_type_name)
    values = [gold, *(aliases or [])] if t.aliases else [gold]
    return any(t.matches(parsed, v, choices) for v in values)


def short_text_matches(parsed: str | None, gold: Any, aliases: Sequence[str] | None = None) -> bool:
    return answers_match(parsed, gold, "short_text", aliases=aliases)


def answer_budget(answer_types: Sequence[str]) -> int:
    """The generation budget that fits the answer formats ``answer_types`` (their largest :attr:`AnswerType.budget`;
    :data:`REASONING_ANSWER_BUDGET` for a name not registered). The built-in tiny model's own budget:
    :data:`selectrust.model.load.TOY_ANSWER_BUDGET`."""
    return max((ANSWER_TYPES[t].budget if t in ANSWER_TYPES else REASONING_ANSWER_BUDGET for t in answer_types),
               default=REASONING_ANSWER_BUDGET)


def answer_instruction(answer_type_name: str) -> str:
    """The closing instruction that makes a response parsable (:attr:`AnswerType.instruction`); ``ValueError`` for
    a type without one."""
    instruction = answer_type(answer_type_name).instruction
    if instruction is None:
        raise ValueError(answer_type_name)
    return instruction


def answer_candidates(row: dict) -> Candidates:
    """A row's known answers, each a tuple of its names that are text (:meth:`AnswerType.known_answers`:
    short_text: ``(gold, *gold_aliases)``, ``(wrong_value,)``; multiple choice: the option letters), handed to the
    parser, with the answer space of the row's question as ``.space`` (:attr:`AnswerType.space`; short_text: the
    relation's names, :func:`eval_hooks.parsers.answer_space.row_answer_space`)."""
    t = answer_type(row["answer_type"])
    groups = (tuple(v for v in g if isinstance(v, str)) for g in t.known_answers(row))
    out = Candidates(g for g in groups if g)
    out.space = t.space(row) if t.space is not None else None
    return out


def answer_status(parsed: str | None, row: dict, response: str | None = None) -> str:
    """``candidate`` (one of the row's known answers: the gold, an alias or the wrong value; for multiple choice
    any option), ``outside`` (an answer that is none of them), or, with nothing parsed, ``no_answer`` or what the
    answer type's ``unanswered`` says of ``response`` (short_text: ``hedged``)."""
    t = answer_type(row["answer_type"])
    if parsed is None:
        if t.unanswered is None or response is None:
            return "no_answer"
        return t.unanswered(response, row.get("choices"), answer_candidates(row))
    if any(t.matches(parsed, v, row.get("choices")) for g in t.known_answers(row) for v in g):
        return "candidate"
    return "outside"


def answer_flags(text: str, parsed: str | None, row: dict) -> dict:
    """What the answer type notes about how a candidate was read (:attr:`AnswerType.flags`; short_text:
    ``{"fuzzy_match": True}`` for a misspelling read as a candidate), ``{}`` otherwise."""
    t = answer_type(row["answer_type"])
    if t.flags is None or parsed is None or answer_status(parsed, row, text) != "candidate":
        return {}
    return t.flags(text, parsed)


def parse_row_answer(text: str, row: dict) -> str | None:
    """:func:`parse_answer` with the row's own choices and candidates."""
    return parse_answer(text, row["answer_type"], choices=row.get("choices"), candidates=answer_candidates(row))


def row_answer_matches(parsed: str | None, row: dict, field: str = "gold") -> bool:
    """Whether ``parsed`` is the row's ``gold`` (with its ``gold_aliases``) or, with ``field="wrong_value"``, its
    wrong value."""
    aliases = answer_type(row["answer_type"]).gold_aliases(row) if field == "gold" else None
    return answers_match(parsed, row[field], row["answer_type"], choices=row.get("choices"), aliases=aliases)
