"""The short_text answer type (a name: a city, a country): what a response commits to (:func:`read_short_text`),
as the normalised name (:func:`~eval_hooks.parsers.sentences.normalize_short_text`), or None for no answer and for a
hedge (two candidates offered as alternatives: status ``hedged``); the rule in full: eval_hooks/FORMATS.md."""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Sequence

from .answer_space import row_answer_space
from .base import AnswerType
from .markers import as_text, clean_span, final_answer_spans
from .sentences import STOP_WORDS, Sentence, normalize_short_text, split_sentences

_CLAUSE_END = re.compile(r"[,;:(]")
_COPULA = re.compile(r"\b(?:is|are|was|would be|should be)\b", re.IGNORECASE)
_NO_ANSWER_WORDS = re.compile(
    r"\b(?:i don['’]?t know|i do not know|not sure|cannot|can['’]?t|unable|sorry|no information|unknown|"
    r"not (?:possible|provided|given|mentioned|able)|won['’]?t|will not|refuse|decline|as an ai)\b", re.IGNORECASE)
MAX_SHORT_ANSWER_CHARS = 80
_REFUSAL = re.compile(r"\b(?:cannot|can['’]?t|won['’]?t|will not|refuse to|not allowed to|unable to)\s+"
                      r"(?:tell|say|share|reveal|disclose|answer)\b|\brefuse\b", re.IGNORECASE)
_NAME = r"[A-Z][\w'’.-]*(?:\s+(?:of\s+|the\s+)?[A-Z][\w'’.-]*)*"
_LIST_SEP = r"\s*(?:,\s*and\b|,|;|\band\b)\s*"
_MAYBE = r"(?:possibly\s+|maybe\s+)?"
_NAME_LIST = re.compile(rf"^\s*{_MAYBE}{_NAME}(?:{_LIST_SEP}{_MAYBE}{_NAME}){{2,}}\s*[.!]?\s*$")
_NAME_LIST_2 = re.compile(rf"^\s*{_MAYBE}{_NAME}(?:{_LIST_SEP}{_MAYBE}{_NAME})+\s*[.!]?\s*$")
_RELATION_WORDS = frozenset(("capital", "country", "continent"))
_PAST_WORDS = frozenset(("until", "formerly", "former", "previously", "once"))


def normalize_short_text_value(value: Any) -> str | None:
    """A gold, alias or wrong value: :func:`normalize_short_text`, or None (invalid) for a stop word
    (:data:`STOP_WORDS`: ``"The"``, ``"of"``, ...), which is no name."""
    n = normalize_short_text(value)
    return None if n in STOP_WORDS else n


def _candidate_names(candidates: Sequence[Any]) -> list[tuple[int, tuple[str, ...]]]:
    """``(answer number, normalised words)`` of each name: a string is an answer of its own, a tuple or list holds
    the names of one answer (the gold with its aliases)."""
    out = []
    for k, group in enumerate(candidates):
        for name in ([group] if isinstance(group, str) else group):
            n = normalize_short_text(name)
            if n:
                out.append((k, tuple(n.split())))
    return out


def _mentions(words: Sequence[str], names: list[tuple[int, tuple[str, ...]]]) -> list[tuple[int, int, int, str]]:
    """Whole-word occurrences ``(start, end, answer number, normalised name)`` of the names in ``words``; one inside
    a longer occurrence ("Guinea" inside "Equatorial Guinea") is dropped."""
    hits = []
    for k, name in names:
        for i in range(len(words) - len(name) + 1):
            if tuple(words[i:i + len(name)]) == name:
                hits.append((i, i + len(name), k, " ".join(name)))
    return sorted(h for h in hits if not any(o[0] <= h[0] and h[1] <= o[1] and o[1] - o[0] > h[1] - h[0]
                                             for o in hits))


class ShortTextReading(NamedTuple):
    """What a short_text response commits to: ``answer``, the normalised name (or None), and ``status``:
    ``answer`` (a candidate or a name outside them), ``hedged`` (two candidates offered as alternatives) or
    ``no_answer``."""

    answer: str | None
    status: str


_NONE = ShortTextReading(None, "no_answer")


def _read_clauses(s: Sentence, start: int, names) -> ShortTextReading | None:
    """The reading of ``s.words[start:]``: the candidate it commits to, or a hedge; None when it offers no candidate
    (names none, or sets aside every one it names)."""
    mentions = _mentions(s.words[start:], names)
    if not mentions:
        return None
    kept = [(i + start, j + start, k, n) for i, j, k, n in mentions if not s.set_aside(i + start, j + start)]
    if not kept:
        return None
    for (i, _, k, _), (i2, _, k2, _) in zip(kept, kept[1:]):
        between = s.words[i:i2]
        if k2 != k and "or" in between and not any(s.starts_with(x, ("or", "rather")) for x in range(i, i2)):
            return ShortTextReading(None, "hedged")
    copula = next((x for x in range(start, len(s.words)) if s.words[x] in ("is", "are", "was")
                   or (s.words[x] == "be" and x > 0 and s.words[x - 1] in ("would", "should"))), None)
    after = [m for m in kept if copula is not None and m[0] > copula and s.clause[m[0]] == s.clause[copula]]
    if len({m[2] for m in (after or kept)}) > 1:
        kept, after = _commitment(s, kept), []
        if len({m[2] for m in kept}) > 1:
            return ShortTextReading(None, "multiple")
    return ShortTextReading((after or kept)[0][3], "answer")


def _clause_words(s: Sentence, i: int) -> set[str]:
    """The words of the clause of word ``i`` and of the clause before it joined by "and"/"," (``set``)."""
    return {w for w, c in zip(s.words, s.clause) if c == s.clause[i]}


def _commitment(s: Sentence, kept: list) -> list:
    """Of mentions ``kept`` ``[(start, end, answer number, name)]`` naming two or more answers, those the sentence
    commits to: mentions in a clause of the past ("was the capital until 1991") are dropped when others remain, then
    mentions in a clause naming the relation (capital, country, continent) are kept when others do not."""
    present = [m for m in kept if not _clause_words(s, m[0]) & _PAST_WORDS] or kept
    related = [m for m in present if _clause_words(s, m[0]) & _RELATION_WORDS]
    return related if related and len(related) < len(present) else present


def _outside_answer(text: str) -> ShortTextReading:
    """A sentence naming no candidate: no answer when it declines ("I don't know", "As an AI, I won't answer"),
    else the first clause after its first copula, normalised ("The capital of Peru is Cusco." -> ``cusco``)."""
    norm = normalize_short_text(text)
    if norm is None or _NO_ANSWER_WORDS.search(text):
        return _NONE
    parts = _COPULA.split(text, 1)
    tail = normalize_short_text(parts[-1]) if len(parts) == 2 else None
    out = normalize_short_text(_CLAUSE_END.split(parts[-1], 1)[0]) or tail or norm  # its first clause
    return ShortTextReading(out, "answer") if len(out) <= MAX_SHORT_ANSWER_CHARS else _NONE


def _read_sentence(s: Sentence, names, start: int = 0) -> ShortTextReading | None:
    """The reading of ``s.words[start:]`` (:func:`_read_clauses`); a self-correction inside it ("Lyon, no wait,
    Paris") commits to what follows it when that names a candidate."""
    reading = _read_clauses(s, start, names)
    for i in range(start + 1, len(s.words)):
        n = s.correction_at(i)
        corrected = _read_clauses(s, i + n, names) if n else None
        if corrected is not None:
            reading = corrected
    return reading


def _answer_source(text: Any) -> str:
    text = as_text(text)
    return next((s for s in reversed(final_answer_spans(text)) if clean_span(s)), text)


def _endorses_other(s: Sentence) -> int:
    """1 when a later sentence opens with "but" and calls something right ("But the snippet says Dubai, and the
    snippet is right."): it takes the answer back like a self-correction; else 0."""
    return int(s.words[0] == "but" and bool({"right", "correct"} & set(s.words)) and "not" not in s.words)


def _read_list(text: str, names, space) -> ShortTextReading | None:
    """A bare list of names ("Abobo, Ivory Coast, Africa.", "Africa and Asia.") read against the answer space
    ``space`` (:class:`~eval_hooks.parsers.answer_space.AnswerSpace`): ``multiple`` when it names two or more
    distinct answers of the space or candidates; the one name of the space when it names one and no candidate
    (a city, country, continent chain ending on the answer); None otherwise (read as a sentence)."""
    if not _NAME_LIST_2.match(text):
        return None
    body = re.sub(r"[.!]\s*$", "", text.strip())
    items = [normalize_short_text(re.sub(r"^(?:possibly|maybe)\s+", "", x, flags=re.IGNORECASE))
             for x in re.split(_LIST_SEP, body)]
    found: dict[tuple, str] = {}
    for n in filter(None, items):
        k = next((k for k, words in names if " ".join(words) == n), None)
        if k is not None:
            found.setdefault(("candidate", k), n)
        elif space.holds(n):
            found.setdefault(("space", n), n)
    if len(found) > 1:
        return ShortTextReading(None, "multiple")
    if len(found) == 1 and next(iter(found))[0] == "space":
        return ShortTextReading(next(iter(found.values())), "answer")
    return None


def _read_first(text: str, names, space=None) -> ShortTextReading:
    """The reading of the first statement: a refusal ("I cannot tell you that the capital is Abu Dhabi", "I refuse
    to say Abu Dhabi") is no answer; a list of names is ``multiple`` when it names two or more answers of the
    question's answer space ``space`` (:func:`_read_list`), or, without a known space, when it holds three or more
    capitalised names ("Riyadh, Doha, Abu Dhabi"); else :func:`_read_sentence`, or an answer outside the
    candidates."""
    if _REFUSAL.search(text):
        return _NONE
    if space is not None:
        listed = _read_list(text, names, space)
        if listed is not None:
            return listed
    elif _NAME_LIST.match(text):
        return ShortTextReading(None, "multiple")
    return _read_sentence(Sentence(text), names) or _outside_answer(text)


def read_short_text(text: str, candidates: Sequence[Any] = ()) -> ShortTextReading:
    """What a response commits to, as ``(answer, status)`` (:class:`ShortTextReading`); ``candidates``: the row's
    known answers, each a name or a tuple of the names of one answer (``("Kyiv", "Kiev")``); their ``space`` (a
    :class:`~eval_hooks.parsers.base.Candidates` list's, from the row's relation) decides when a list is ``multiple``.

    Rule (deterministic, never a similarity score), written out in eval_hooks/FORMATS.md: the text after the last
    final-answer marker, else the whole response, in sentences (an abbreviation inside a name, "St. Petersburg",
    ends none; a colon or a line break after "is" is read through). Questions ("Sofia? Plovdiv?") commit to nothing
    while a statement follows; the first statement commits, and a later self-correction ("No wait, Paris.", "No, it
    is Paris.") replaces it. In a sentence, candidates are found as whole words after normalisation; one the
    sentence negates or sets aside ("not Lyon", "Lyon is wrong", "while Lyon is a major city") is not offered; two
    different answers offered as alternatives ("either Paris or Lyon") are a hedge, no committed answer; of the
    rest, the first after the first copula wins, else the first. A sentence whose candidates are all set aside
    commits to none; one naming no candidate answers outside the candidates (the first clause after its copula), or
    declines (``I don't know``, ``As an AI, I won't answer``: no answer)."""
    names = _candidate_names(candidates)
    sentences = split_sentences(clean_span(_answer_source(text)))
    if not sentences:
        return _NONE
    first = next((k for k, s in enumerate(sentences) if not s.endswith("?")), 0)
    reading = _read_first(sentences[first], names, getattr(candidates, "space", None))
    pending = False  # the previous sentence was a take-back alone ("Just kidding!")
    for text_ in sentences[first + 1:]:
        if _REFUSAL.search(text_):
            continue
        s = Sentence(text_)
        n = (s.correction_at(0) or _endorses_other(s)) if s.words else 0
        corrected = _read_sentence(s, names, n) if n or pending else None
        pending = bool(s.words) and n == len(s.words)
        if corrected is not None:
            reading = corrected
    return reading


def parse_short_text(text: str, candidates: Sequence[Any] = ()) -> str | None:
    """The name a response commits to, normalised (:func:`normalize_short_text`), or ``None`` (no answer, or a
    hedge): :func:`read_short_text`'s answer."""
    return read_short_text(text, candidates).answer


def short_text_unanswered(text: str, choices: Any, candidates: Sequence[Any]) -> str:
    """Why a short_text response has no answer: ``hedged`` (two candidates offered as alternatives), ``multiple``
    (two or more candidates named together: "X and Y", a list of names) or ``no_answer``."""
    status = read_short_text(text, candidates).status
    return status if status in ("hedged", "multiple") else "no_answer"


SHORT_TEXT = AnswerType(
    "short_text", parse=lambda text, choices, cands: parse_short_text(text, cands),
    normalize=lambda value, choices=None: normalize_short_text_value(value), aliases=True, budget=32,
    unanswered=short_text_unanswered, space=row_answer_space,
    accepted="a non-empty name such as \"Sofia\", not an article or stop word such as \"The\" (matched after "
             "normalising case, Latin diacritics and a leading article)")
