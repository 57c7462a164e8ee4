"""The shape of one answer type (:class:`AnswerType`), below every parser module and the registry
(:mod:`eval_hooks.parsers`), so that each type's module declares its own entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

#: Generation budget (new tokens) of an answer format that reasons to a final line (:attr:`AnswerType.budget`).
REASONING_ANSWER_BUDGET = 512
#: The closing instruction of the types that reason to a final ``ANSWER:`` line (``.format("<number>")``).
ANSWER_LINE = 'End your response with a final line of the form "ANSWER: {}".'


class Candidates(list):
    """A row's known answers (a list of tuples of names, :func:`eval_hooks.parsers.answer_candidates`) with its
    question's answer space as ``space`` (:attr:`AnswerType.space`; None when unknown). A plain list of candidates
    is read as one without a space."""

    space: Any = None


@dataclass(frozen=True)
class AnswerType:
    """One answer format, whole: how a response is parsed, how a gold (or wrong) value is normalised and compared,
    what a row's candidates are (the answers that count as ``candidate`` in :func:`answer_status`, and that a
    parser may look for), and what the families and the generation budget need to know about it.

    - ``parse(text, choices, candidates) -> str | None``: the canonical final answer of a response, or None (no
      answer). ``choices``: the row's options; ``candidates``: its known answers (:func:`answer_candidates`).
    - ``normalize(value, choices) -> str | None``: the canonical form of a gold or wrong value; None = not a valid
      answer of this type (the families refuse such a gold when the data loads).
    - ``match(parsed, value, choices) -> bool``: whether a parsed answer is ``value`` (default: equal to its
      normalised form).
    - ``candidates(row) -> list[tuple]``: the row's known answers, each a tuple of the names of one answer
      (default: ``(gold, *gold_aliases)`` (the aliases when ``aliases``), ``(wrong_value,)``).
    - ``space(row) -> AnswerSpace | None``: the names that can answer the row's question (short_text: its relation's
      cities, countries or continents, :mod:`eval_hooks.parsers.answer_space`), handed to the parser as
      ``candidates.space`` (:class:`Candidates`); None = unknown.
    - ``unanswered(text, choices, candidates) -> str``: the status of a response that has no answer (default
      ``no_answer``; short_text: ``hedged`` for two candidates offered as alternatives).
    - ``aliases``: rows of this type may carry ``gold_aliases`` (other names of the gold) and ``gold_alt_names``
      (more names, e.g. GeoNames' alternate names; :meth:`gold_aliases`).
    - ``flags(text, parsed) -> dict``: what a scored row notes about how a candidate was read (short_text:
      ``{"fuzzy_match": True}`` for a misspelling read as a candidate; :func:`answer_flags`); None = nothing.
    - ``accepted``: what a valid gold looks like, for error messages.
    - ``budget``: the generation budget (new tokens) that fits a response (:func:`answer_budget`).
    - ``instruction``: the closing prompt line that makes a response parsable, for families that write the
      prompt (:func:`answer_instruction`); None = the family or the data writes it.
    - ``same(a, b) -> bool``: whether two canonical values (a gold and a wrong value) are one answer (default: equal
      as written; numeric: within the matcher's tolerance).
    - ``leak(text, gold, choices) -> str | None``: what in ``text`` (a workflow step) reveals ``gold``, or None
      (:func:`eval_hooks.builders.workflows.leaked_answer`); None = the type has no leak check (nothing is found).

    A new answer type is one entry in the registry :data:`eval_hooks.parsers.ANSWER_TYPES` (a line of its
    ``BUILTIN``, :func:`eval_hooks.parsers.register_answer_type`, or an entry point of the group
    ``selectrust.answer_types``), with its functions beside it; nothing else compares answer-type names (a family
    lists the names it accepts)."""

    name: str
    parse: Callable[[str, Any, Sequence[str]], "str | None"]
    normalize: Callable[[Any, Any], "str | None"]
    accepted: str
    match: "Callable[[str, Any, Any], bool] | None" = None
    candidates: "Callable[[dict], list[tuple]] | None" = None
    unanswered: "Callable[[str, Any, Sequence[Any]], str] | None" = None
    aliases: bool = False
    budget: int = REASONING_ANSWER_BUDGET
    instruction: str | None = None
    same: "Callable[[str, str], bool] | None" = None
    leak: "Callable[[str, Any, Any], str | None] | None" = None
    space: "Callable[[dict], Any] | None" = None
    flags: "Callable[[str, str], dict] | None" = None

    def matches(self, parsed: str, value: Any, choices: Any = None) -> bool:
        """Whether the parsed answer ``parsed`` is ``value`` (``match``, else equal to ``normalize(value)``)."""
        if self.match is not None:
            return self.match(parsed, value, choices)
        g = self.normalize(value, choices)
        return g is not None and parsed == g

    def known_answers(self, row: dict) -> list[tuple]:
        """The row's known answers (``candidates``, else ``(gold, *gold_aliases)``, ``(wrong_value,)``)."""
        if self.candidates is not None:
            return self.candidates(row)
        aliases = self.gold_aliases(row)
        groups = [(row.get("gold"), *aliases), (row.get("wrong_value"),)]
        return [g for g in (tuple(v for v in group if v is not None) for group in groups) if g]

    def gold_aliases(self, row: dict) -> list:
        """The gold's other names (a type with ``aliases``): ``gold_aliases``, then ``gold_alt_names`` (other names
        of the place, e.g. GeoNames' historic and transliterated names, written by ``build-facts``; issue 59), less
        any alternate name that is no name or is the wrong value's."""
        if not self.aliases:
            return []
        aliases = [a for a in (row.get("gold_aliases") or []) if isinstance(a, str)]
        alt = row.get("gold_alt_names")
        if isinstance(alt, list) and alt:
            wrong = self.normalize(row.get("wrong_value")) if isinstance(row.get("wrong_value"), str) else None
            aliases += [a for a in alt if isinstance(a, str) and self.normalize(a) not in (None, wrong)]
        return aliases

    def same_answer(self, a: str, b: str) -> bool:
        """Whether the canonical values ``a`` and ``b`` are one answer (``same``, else ``a == b``)."""
        return self.same(a, b) if self.same is not None else a == b

    def leaked(self, text: str, gold: Any, choices: Any = None) -> str | None:
        """What in ``text`` reveals ``gold`` (``leak``), or None; always None for a type without a leak check."""
        return None if self.leak is None else self.leak(text, gold, choices)
