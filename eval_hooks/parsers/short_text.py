"""The short_text answer type (a name: a city, a country): what a response commits to (:func:`read_short_text`),
as the normalised name (:func:`~eval_hooks.parsers.sentences.normalize_short_text`), or None: no answer, ``hedged``
(two answers offered with "or") or ``multiple`` (two or more answers named, in any layout).

How it decides (issue 51; in full, eval_hooks/FORMATS.md): the response is read as **claims**, one per clause naming
a candidate (:mod:`eval_hooks.parsers.claims`: the names it mentions, whether it asserts or denies them, whether it
is the response's own word or reports the context, its tense, its modality, and whether it is about the asked
relation or another property). A list in any layout (commas, "or", slashes, "and", lines, bullets, numbers) is one
claim naming every answer it lists. A self-correction ("No wait", "Just kidding", "On second thought") takes back
every claim before it; calling the context right ("the note is right", "That is correct." after a report) adopts the
report and takes back what came before it. **The answer is what the remaining claims agree on**: of the response's
own asserted claims about the relation, the present ones (else all), of those the certain ones (else all); one
answer is the answer, two or more are ``multiple`` (``hedged`` when they differ only by an "or"). Without such a
claim, the first statement naming no candidate answers outside the candidates (``The capital of Peru is Cusco.``)
or declines (``I don't know``); then claims about another property ("St. Petersburg is a city in Russia.") are read
the same way; else no answer."""

from __future__ import annotations

import re
from itertools import islice
from typing import Any, NamedTuple, Sequence

from .answer_space import row_answer_space, wide_place
from .base import AnswerType
from .claims import Claim, candidate_names, corrections, endorses_context, mentions, sentence_claims
from .markers import as_text, clean_span, final_answer_spans
from .sentences import STOP_WORDS, Sentence, normalize_short_text, split_sentences

_CLAUSE_END = re.compile(r"[,;:(]")
_COPULA = re.compile(r"\b(?:is|are|was|would be|should be)\b", re.IGNORECASE)
_NO_ANSWER_WORDS = re.compile(
    r"\b(?:i don['’]?t know|i do not know|not sure|cannot|can['’]?t|unable|sorry|no information|unknown|"
    r"not (?:possible|provided|given|mentioned|able)|won['’]?t|will not|refuse|decline|as an ai)\b", re.IGNORECASE)
MAX_SHORT_ANSWER_CHARS = 80
MAX_SENTENCES = 100  # a response is read up to its 100th sentence (a short answer is far shorter; bounds the work)
_REFUSAL = re.compile(r"\b(?:cannot|can['’]?t|won['’]?t|will not|refuse to|not allowed to|unable to)\s+"
                      r"(?:tell|say|share|reveal|disclose|answer)\b|\brefuse\b", re.IGNORECASE)
_NAME = r"[A-Z][\w'’.-]*(?:\s+(?:of\s+|the\s+)?[A-Z][\w'’.-]*)*"
_LIST_SEP = r"\s*(?:,\s*(?:and|or)\b|,|;|/|&|\band\b|\bor\b)\s*"
_MAYBE_WORDS = r"(?:possibly|maybe|perhaps|either)\s+"
_MAYBE = rf"(?:{_MAYBE_WORDS})?"
_NAME_LIST = re.compile(rf"^\s*{_MAYBE}{_NAME}(?:{_LIST_SEP}{_MAYBE}{_NAME}){{2,}}\s*[.!]?\s*$")
_NAME_LIST_2 = re.compile(rf"^\s*{_MAYBE}{_NAME}(?:{_LIST_SEP}{_MAYBE}{_NAME})+\s*[.!]?\s*$")
_BULLET = re.compile(r"^\s*(?:[-*•+]|\(?\d{1,2}[.)])\s+")
_LIST_LINE = re.compile(rf"{_MAYBE}{_NAME}")
_QUOTE = re.compile(r'"([^"\n]+)"|“([^”\n]+)”|«([^»\n]+)»|„([^“”\n]+)[“”]')


def normalize_short_text_value(value: Any) -> str | None:
    """A gold, alias or wrong value: :func:`normalize_short_text`, or None (invalid) for a stop word
    (:data:`STOP_WORDS`: ``"The"``, ``"of"``, ...), which is no name."""
    n = normalize_short_text(value)
    return None if n in STOP_WORDS else n


class ShortTextReading(NamedTuple):
    """What a short_text response commits to: ``answer``, the normalised name (or None), and ``status``:
    ``answer`` (a candidate or a name outside them), ``hedged`` (two answers offered with "or"), ``multiple`` (two or
    more answers named) or ``no_answer``."""

    answer: str | None
    status: str


_NONE = ShortTextReading(None, "no_answer")


class _Statement(NamedTuple):
    sentence: Sentence
    text: str
    quoted: bool  # inside a quotation: the context's words


def _answer_source(text: Any) -> str:
    text = as_text(text)
    return next((s for s in reversed(final_answer_spans(text)) if clean_span(s)), text)


def _layout(text: str) -> str:
    """Bullets and numbers at line starts dropped ("- ", "* ", "1. "); two or more lines in a row that each hold
    only a name ("Canberra\\nSydney") joined into one list ("Canberra, Sydney.")."""
    out: list[str] = []
    run: list[tuple[str, str]] = []  # (line, the name it holds)

    def flush():
        if run:
            out.append(", ".join(name for _, name in run) + "." if len(run) > 1 else run[0][0])
        run.clear()

    for line in text.split("\n"):
        item = _BULLET.sub("", line).strip()
        bare = item.rstrip(" .;,!")
        if item and len(bare.split()) <= 6 and _LIST_LINE.fullmatch(bare):
            run.append((item, bare))
        elif item:
            flush()
            out.append(item)
    flush()
    return "\n".join(out)


def _pieces(text: str) -> list[tuple[str, bool]]:
    """``text`` cut at quotations of three or more words (not one that is the whole text): ``(piece, quoted)``."""
    s = text.strip()
    quotes = [m for m in _QUOTE.finditer(s) if len(next(g for g in m.groups() if g).split()) >= 3
              and not (m.start() == 0 and not s[m.end():].strip(" .!"))]
    out, at = [], 0
    for m in quotes:
        out += [(s[at:m.start()], False), (next(g for g in m.groups() if g), True)]
        at = m.end()
    out.append((s[at:], False))
    return [(clean_span(p), q) for p, q in out if clean_span(p)]


def _statements(text: Any) -> list[_Statement]:
    """The sentences of the answer (the text after the last final-answer marker, else the whole response), questions
    left out while a statement remains ("Sofia? Plovdiv? The capital of Bulgaria is Plovdiv.")."""
    texts = ((t, quoted) for piece, quoted in _pieces(_layout(_answer_source(text))) for t in split_sentences(piece))
    out = [_Statement(Sentence(t), t, quoted) for t, quoted in islice(texts, MAX_SENTENCES)]
    return [s for s in out if not s.text.endswith("?")] or out


def _list_items(body: str, names, space) -> list[str]:
    """The normalised names of a list, a known name holding "and" kept whole ("Trinidad and Tobago")."""
    known = {" ".join(words) for _, words in names}
    out: list[str] = []
    for piece in re.split(r"\s*[,;/&]\s*", body):
        piece = re.sub(rf"^(?:(?:and|or)\s+)?(?:{_MAYBE_WORDS})?", "", piece.strip(), flags=re.IGNORECASE)
        n = normalize_short_text(piece)
        if n and (n in known or (space is not None and space.holds(n)) or wide_place(n)):
            out.append(n)
        elif n:
            out += [normalize_short_text(re.sub(rf"^{_MAYBE_WORDS}", "", x, flags=re.IGNORECASE)) or ""
                    for x in re.split(r"\s+(?:and|or)\s+", piece, flags=re.IGNORECASE)]
    return [n for n in out if n]


def _list_claim(text: str, names, space, index: int) -> Claim | None:
    """A bare list of names ("Abobo, Ivory Coast, Africa.", "Canberra, Sydney, Perth or Darwin.") as one claim naming
    the distinct answers it lists: with the question's answer space ``space``, the candidates and the names of the
    space (a name inside another listed name, "Delhi" after "New Delhi", is the same place); without one, three or
    more capitalised names. None when it is no list, or lists one candidate (then read as a sentence). Two answers
    separated by "or" only are an alternative."""
    if space is None and not _NAME_LIST.match(text) or space is not None and not _NAME_LIST_2.match(text):
        return None
    body = re.sub(r"[.!]\s*$", "", text.strip())
    found: dict = {}
    for n in _list_items(body, names, space):
        k = next((k for k, words in names if " ".join(words) == n), None)
        if k is None and (space is None or space.holds(n)):
            k = n
        if k is not None:
            found.setdefault(k, n)
    found = {k: n for k, n in found.items() if not isinstance(k, str)
             or not any(o != n and f" {n} " in f" {o} " for o in found.values())}
    if len(found) == 1 and isinstance(next(iter(found)), str) and space is not None:
        return Claim(tuple(found.items()), index, 0)
    if len(found) < 2:
        return None
    seps = re.findall(_LIST_SEP, body)
    alternative = len(found) == 2 and all("or" in sep.lower() for sep in seps)
    return Claim(tuple(found.items()), index, 0, certain=not alternative, alternative=alternative)


def _outside_answer(text: str) -> ShortTextReading:
    """A statement naming no candidate: no answer when it declines ("I don't know", "As an AI, I won't answer"),
    else the first clause after its first copula, normalised ("The capital of Peru is Cusco." -> ``cusco``)."""
    norm = normalize_short_text(text)
    if norm is None or _NO_ANSWER_WORDS.search(text):
        return _NONE
    parts = _COPULA.split(text, 1)
    tail = normalize_short_text(parts[-1]) if len(parts) == 2 else None
    out = normalize_short_text(_CLAUSE_END.split(parts[-1], 1)[0]) or tail or norm  # its first clause
    return ShortTextReading(out, "answer") if len(out) <= MAX_SHORT_ANSWER_CHARS else _NONE


def _unnamed_text(s: Sentence, names) -> str:
    """The sentence without its clauses that name a candidate ("Fort Worth is in Canada, not in the United States."
    -> "fort worth is in canada")."""
    named = {s.clause[m[0]] for m in mentions(s.words, names, s)}
    parts: dict[int, list[int]] = {}
    for i, c in enumerate(s.clause):
        if c not in named:
            parts.setdefault(c, []).append(i)
    return ", ".join(s.folded[s.spans[ix[0]][0]:s.spans[ix[-1]][1]] for ix in parts.values())


def _outside(statements: list[_Statement], claims: list[Claim], names, start: int) -> ShortTextReading | None:
    """The answer outside the candidates of the first statement from number ``start`` that names none it asserts
    (its clauses naming only denied or reported candidates left out: "Not Dubai." holds nothing, and is passed);
    no answer when it refuses; None when the first such statement asserts a candidate."""
    for k, st in enumerate(statements[start:], start=start):
        if st.quoted or st.text.rstrip().endswith(":") or endorses_context(st.sentence):
            continue
        if _REFUSAL.search(st.text):
            return _NONE
        own = [c for c in claims if c.sentence == k]
        if any(c.live for c in own):
            return None
        s = st.sentence
        if sum(s.correction_at(i) for i in range(len(s.words))) >= len(s.words):  # "No.", "Just kidding!"
            continue
        text = _unnamed_text(s, names) if own else st.text
        if normalize_short_text(text):
            return _outside_answer(text)
    return None


def _agreed(claims: list[Claim]) -> ShortTextReading:
    """What ``claims`` commit to: the present ones (else all), of those the certain ones (else all; with a name offered as
    possible, all); one answer, or ``multiple`` (``hedged`` when only an "or" alternative differs, or when a
    name is offered as possible beside another: "Paris, but Lyon is also plausible")."""
    claims = [c for c in claims if c.present] or claims
    if not any(c.offered for c in claims):  # a name offered as possible keeps every other claim beside it
        claims = [c for c in claims if c.certain] or claims
    if len({k for c in claims for k, _ in c.answers}) == 1:
        return ShortTextReading(claims[0].answers[0][1], "answer")
    if any(c.multi for c in claims):
        return ShortTextReading(None, "multiple")
    if any(c.offered for c in claims) or any(c.alternative for c in claims):
        return ShortTextReading(None, "hedged")
    return ShortTextReading(None, "multiple")


def read_short_text(text: str, candidates: Sequence[Any] = ()) -> ShortTextReading:
    """What a response commits to, as ``(answer, status)`` (:class:`ShortTextReading`; the rule: module docstring,
    eval_hooks/FORMATS.md); ``candidates``: the row's known answers, each a name or a tuple of the names of one
    answer (``("Kyiv", "Kiev")``); their ``space`` (a :class:`~eval_hooks.parsers.base.Candidates` list's, from the
    row's relation) decides which names a list counts."""
    names = candidate_names(candidates)
    space = getattr(candidates, "space", None)
    statements = _statements(text)
    claims: list[Claim] = []
    marks: list[tuple[int, int]] = []  # (sentence, word) of each take-back
    for k, st in enumerate(statements):
        if _REFUSAL.search(st.text):
            continue
        listed = _list_claim(st.text, names, space, k)
        found = [listed] if listed is not None else sentence_claims(st.sentence, names, k, st.quoted)
        claims += found
        marks += [(k, i) for i in corrections(st.sentence)]
        if endorses_context(st.sentence):  # "the snippet is right": its report (here, else the last) is adopted
            reported = [c for c in found if not c.own] or [c for c in claims if not c.own and c.sentence == max(
                (c.sentence for c in claims if not c.own), default=-1)]
            for c in reported:
                c.own = True
            marks += [(reported[0].sentence, -1)] if reported else []
    live = [c for c in claims if c.live]
    cut = max((m for m in marks if any((c.sentence, c.at) > m for c in live)), default=None)
    if cut is not None:
        live = [c for c in live if (c.sentence, c.at) > cut]
    about = [c for c in live if c.relation]
    if about:
        return _agreed(about)
    outside = _outside(statements, claims, names, cut[0] if cut else 0)
    if outside is not None:
        return outside
    return _agreed(live) if live else _NONE


def fuzzy_match(text: Any, parsed: str | None) -> bool:
    """Whether the candidate ``parsed`` was read from a misspelling of it (it does not occur as whole words in the
    normalised response: "Ottwa" read as ``ottawa``; issue 59)."""
    norm = normalize_short_text(as_text(text)) or ""
    return parsed is not None and f" {parsed} " not in f" {norm} "


def parse_short_text(text: str, candidates: Sequence[Any] = ()) -> str | None:
    """The name a response commits to, normalised (:func:`normalize_short_text`), or ``None`` (no answer, a hedge,
    several answers): :func:`read_short_text`'s answer."""
    return read_short_text(text, candidates).answer


def short_text_unanswered(text: str, choices: Any, candidates: Sequence[Any]) -> str:
    """Why a short_text response has no answer: ``hedged`` (two answers offered with "or"), ``multiple`` (two or more
    answers named: "X and Y", a list, two claims that differ) or ``no_answer``."""
    status = read_short_text(text, candidates).status
    return status if status in ("hedged", "multiple") else "no_answer"


SHORT_TEXT = AnswerType(
    "short_text", parse=lambda text, choices, cands: parse_short_text(text, cands),
    normalize=lambda value, choices=None: normalize_short_text_value(value), aliases=True, budget=32,
    unanswered=short_text_unanswered, space=row_answer_space,
    flags=lambda text, parsed: {"fuzzy_match": True} if fuzzy_match(text, parsed) else {},
    accepted="a non-empty name such as \"Sofia\", not an article or stop word such as \"The\" (matched after "
             "normalising case, Latin diacritics and a leading article)")
