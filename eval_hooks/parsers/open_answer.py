"""The open_answer type: a relation-free judge of short open-domain answers (names, numbers, dates, phrases), as in
NQ-Swap (docs/nq_swap.md#the-judge). It needs no answer space: it asks which of the row's known answers the
response *contains*.

How it decides (:func:`read_open_answer`):

1. Normalise (:func:`open_tokens`, SQuAD-style, applied alike to answers and responses): Latin accents dropped,
   lower case, thousands separators dropped (``1,000`` -> ``1000``), apostrophes dropped (``O'Meara`` -> ``omeara``),
   other punctuation turned to spaces, the articles ``a``/``an``/``the`` dropped wherever they stand; number words
   read as digits (``twenty-three`` -> ``23``, ``seven hundred`` -> ``700``); ordinal suffixes dropped (``4th`` ->
   ``4``); dates put in one order (``July 4, 1776`` = ``4th of July 1776`` = ``4 july 1776``; ``Sept 3`` =
   ``3 september``).
2. Where to look: the text after the last final-answer marker (``Answer: X``, ``the answer is X``) that contains a
   known answer, else the whole response.
3. A known answer is *named* when its normalised words appear there contiguously, as whole words. An occurrence
   inside a longer occurrence of another known answer does not count ("Paul" inside "Paul Simon").
4. The gold (or one of its aliases) alone: the answer is that name (correct). The wrong value alone: the wrong
   value. Both: no committed answer, status ``multiple``. Neither: a response that declines ("I don't know", "the
   passage does not say") or is empty has no answer (``no_answer``); any other is an answer outside the candidates,
   its first sentence (normalised, at most :data:`MAX_OUTSIDE_WORDS` words).

What it does not read (measured on real responses in docs/nq_swap.md#the-judge): negation ("not 23 but 775"
names both), paraphrase ("the fourth" for ``4``), units or rounding (``1.5 million`` is not ``1,500,000``).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Sequence

from .base import AnswerType
from .markers import as_text, final_answer_spans
from .sentences import normalize_short_text, split_sentences

MAX_OUTSIDE_WORDS = 12
MAX_RESPONSE_CHARS = 4000  # a short answer is far shorter; bounds the work

_ARTICLES = frozenset(("a", "an", "the"))
_UNITS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                     "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MONTH_ABBREVIATIONS = {"jan": "january", "feb": "february", "mar": "march", "apr": "april", "jun": "june",
                        "jul": "july", "aug": "august", "sep": "september", "sept": "september", "oct": "october",
                        "nov": "november", "dec": "december"}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_APOSTROPHE = re.compile(r"(?<=\w)['’](?=\w)")
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_DECLINES = re.compile(
    r"\b(?:i don['’]?t know|i do not know|no idea|not sure|cannot|can['’]?t|unable|sorry|no information|unknown|"
    r"not (?:possible|provided|given|mentioned|stated|specified|available|able)|"
    r"(?:does|do|did) not (?:say|mention|state|specify|provide|give|contain)|"
    r"(?:doesn['’]?t|don['’]?t|didn['’]?t) (?:say|mention|state|specify|provide|give|contain)|as an ai)\b",
    re.IGNORECASE)


class OpenReading(NamedTuple):
    """What a response commits to: ``answer`` (normalised; None when it commits to none) and ``status``
    (``answer`` | ``multiple`` | ``no_answer``)."""

    answer: str | None
    status: str


def _numbers(words: list[str]) -> list[str]:
    """Runs of number words read as one number (``seven hundred seventy five`` -> ``775``); a run starts with a
    unit, teen or ten word (``million`` alone stays a word)."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] not in _UNITS and words[i] not in _TENS:
            out.append(words[i])
            i += 1
            continue
        total = current = 0
        while i < len(words) and (words[i] in _UNITS or words[i] in _TENS or words[i] in _SCALES):
            w = words[i]
            if w in _SCALES and _SCALES[w] == 100:
                current = max(current, 1) * 100
            elif w in _SCALES:
                total, current = total + max(current, 1) * _SCALES[w], 0
            else:
                current += _UNITS.get(w, _TENS.get(w, 0))
            i += 1
        out.append(str(total + current))
    return out


def _is_day(word: str) -> bool:
    return word.isdigit() and 1 <= int(word) <= 31 and len(word) <= 2


def _dates(words: list[str]) -> list[str]:
    """Month abbreviations next to a number spelled out; ``<month> <day>`` -> ``<day> <month>``; ``<day> of
    <month>`` -> ``<day> <month>``."""
    words = list(words)
    for i, w in enumerate(words):
        near_number = any(0 <= j < len(words) and words[j].isdigit() for j in (i - 1, i + 1, i + 2))
        if w in _MONTH_ABBREVIATIONS and near_number:
            words[i] = _MONTH_ABBREVIATIONS[w]
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in _MONTHS and i + 1 < len(words) and _is_day(words[i + 1]):
            out += [words[i + 1], w]
            i += 2
            continue
        if _is_day(w) and i + 2 < len(words) and words[i + 1] == "of" and words[i + 2] in _MONTHS:
            out += [w, words[i + 2]]
            i += 3
            continue
        out.append(w)
        i += 1
    return out


def open_tokens(text: Any) -> list[str]:
    """The normalised words of ``text`` (module docstring, step 1); [] for a non-string."""
    if not isinstance(text, str):
        return []
    text = _APOSTROPHE.sub("", _THOUSANDS.sub("", text[:MAX_RESPONSE_CHARS]))
    words = (normalize_short_text(text) or "").split()
    words = [m.group(1) if (m := _ORDINAL.match(w)) else w for w in words if w not in _ARTICLES]
    return _dates(_numbers(words))


def normalize_open_answer(value: Any) -> str | None:
    """A gold, alias or wrong value as normalised words (:func:`open_tokens`), or None (not a valid answer: not a
    string, or nothing left after normalisation, e.g. ``"The"``)."""
    words = open_tokens(value)
    return " ".join(words) or None


def _known(candidates: Sequence[Any]) -> list[tuple[int, tuple[str, ...]]]:
    """``(answer number, normalised words)`` of each name: a string is an answer of its own, a tuple or list holds
    the names of one answer (the gold with its aliases)."""
    out = []
    for k, group in enumerate(candidates):
        for name in ([group] if isinstance(group, str) else group):
            words = tuple(open_tokens(name))
            if words:
                out.append((k, words))
    return out


def _named(words: Sequence[str], known: list[tuple[int, tuple[str, ...]]]) -> dict[int, str]:
    """``{answer number: the first of its names found}`` among ``words`` (step 3): whole-word occurrences, less
    those inside a longer occurrence of another name."""
    hits = []
    for k, name in known:
        n = len(name)
        hits += [(i, i + n, k, " ".join(name)) for i in range(len(words) - n + 1) if tuple(words[i:i + n]) == name]
    kept = [h for h in hits if not any(o[0] <= h[0] and h[1] <= o[1] and o[1] - o[0] > h[1] - h[0] for o in hits)]
    out: dict[int, str] = {}
    for _, _, k, name in sorted(kept):
        out.setdefault(k, name)
    return out


def _outside(source: str) -> OpenReading:
    """A response that names no known answer: no answer when it declines or is empty, else its first sentence."""
    if not source.strip() or _DECLINES.search(source):
        return OpenReading(None, "no_answer")
    first = next((s for s in split_sentences(source.strip()) if s.strip()), source)
    words = open_tokens(first)[:MAX_OUTSIDE_WORDS]
    return OpenReading(" ".join(words), "answer") if words else OpenReading(None, "no_answer")


def read_open_answer(text: Any, candidates: Sequence[Any] = ()) -> OpenReading:
    """What a response commits to (module docstring): ``candidates`` are the row's known answers, each a name or a
    tuple of the names of one answer (the gold with its aliases first, then the wrong value)."""
    text = as_text(text)[:MAX_RESPONSE_CHARS]
    known = _known(candidates)
    named: dict[int, str] = {}
    source = text
    for span in reversed(final_answer_spans(text)):
        named = _named(open_tokens(span), known)
        if named:
            source = span
            break
    if not named:
        named = _named(open_tokens(text), known)
    if len(named) > 1:
        return OpenReading(None, "multiple")
    if named:
        return OpenReading(next(iter(named.values())), "answer")
    return _outside(source)


def parse_open_answer(text: Any, candidates: Sequence[Any] = ()) -> str | None:
    """The normalised answer a response commits to, or None (no answer, or several known answers named)."""
    return read_open_answer(text, candidates).answer


def open_answer_unanswered(text: str, choices: Any, candidates: Sequence[Any]) -> str:
    """Why a response has no answer: ``multiple`` (it names two known answers, the gold and the wrong value) or
    ``no_answer``."""
    status = read_open_answer(text, candidates).status
    return status if status == "multiple" else "no_answer"


OPEN_ANSWER = AnswerType(
    "open_answer", parse=lambda text, choices, cands: parse_open_answer(text, cands),
    normalize=lambda value, choices=None: normalize_open_answer(value), aliases=True, budget=32,
    unanswered=open_answer_unanswered,
    accepted="a non-empty short answer (a name, number, date or phrase) with a word left after dropping "
             "punctuation and articles; compared after SQuAD-style normalisation (docs/nq_swap.md#the-judge)")
