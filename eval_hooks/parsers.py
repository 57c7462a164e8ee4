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
- short_text (a name: a city, a country): the normalised answer text (``normalize_short_text``), see
  ``parse_short_text`` for the rule.

The answer types are a registry, :data:`ANSWER_TYPES` (name -> :class:`AnswerType`): each entry holds its parser,
its normaliser and comparison, its candidates (what counts as ``candidate`` in :func:`answer_status`), the text that
describes a valid gold, its generation budget and, for families that write prompts, its answer instruction.
``parse_answer``, ``normalize_gold``, ``answers_match``, ``answer_status``, ``answer_budget`` and
``answer_instruction`` only look an entry up, so a new answer type is one entry (docs/architecture.md#how-to-add).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, Callable, Iterator, Sequence

MED_LABELS = ("Higher", "Lower", "No Difference", "Uncertain")
FORK_LETTERS = ("A", "B")
#: Generation budget (new tokens) of an answer format that reasons to a final line (:attr:`AnswerType.budget`).
REASONING_ANSWER_BUDGET = 512
TOY_ANSWER_BUDGET = 4  # the built-in tiny model answers one digit
MAX_DIGITS = 60  # longer digit runs are not answers (and would hit int() limits)

# -- final-answer markers -----------------------------------------------------------------------------

_MARKER = re.compile(
    r"(?P<boxed>\\(?:boxed|fbox)\s*\{)"
    r"|(?P<hash>####)"
    r"|(?i:(?:answer|option|choice)\s+(?:is|would\s+be|should\s+be)\b)"
    r"|(?i:answer)[\s*_]*[:：]"
)


def _brace_content(text: str, start: int, limit: int = 2000) -> str:
    """Content of a ``{...}`` group whose opening brace ends at ``start`` (nesting respected)."""
    depth, i, end = 1, start, min(len(text), start + limit)
    while i < end:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return text[start:end]


def _rest_of_line(text: str, start: int) -> str:
    nl = text.find("\n", start)
    span = text[start:] if nl == -1 else text[start:nl]
    if span.strip(" \t*_:：") or nl == -1:
        return span
    # "The answer is\n\n18": take the next non-empty line
    for line in text[nl + 1:].split("\n", 8)[:8]:
        if line.strip():
            return line
    return span


def final_answer_spans(text: str) -> list[str]:
    """Texts following each final-answer marker, in order of appearance."""
    spans = []
    for m in _MARKER.finditer(text):
        if m.group("boxed"):
            spans.append(_brace_content(text, m.end()))
        else:
            spans.append(_rest_of_line(text, m.end()))
    return spans


def _last_parse(text: str, parse_span) -> str | None:
    for span in reversed(final_answer_spans(text)):
        v = parse_span(span)
        if v is not None:
            return v
    return None


def _last_line(text: str) -> str:
    for line in reversed(text.strip().split("\n")):
        if line.strip():
            return line
    return ""


def _clean(span: str) -> str:
    return span.strip().strip("*_`\"'“”‘’ \t").strip()


# -- numbers ------------------------------------------------------------------------------------------

_LATEX_FRAC = re.compile(r"(\d?)\\[dt]?frac\s*(?:\{([^{}]{0,80})\}|(\d))\s*(?:\{([^{}]{0,80})\}|(\d))")
_LATEX_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\s*\{([^{}]{0,200})\}")
_INT = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)"
_EXP = r"(?:[eE](?P<exp>[-+]?\d{1,3})(?!\w|\.\d)|\s?(?:×|\\times|\\cdot|x|\*)\s?10\s?\^\s?\{?(?P<exp10>[-+]?\d{1,3})\}?)"
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+](?=\$?\.?\d))?\$?"
    r"(?:(?P<whole>\d{1,12})\s+(?=\d{1,12}\s?/\s?\d{1,12}(?![\d/]|\.\d)))?"  # mixed number "1 1/2"
    r"(?P<num>" + _INT + r"(?:\.\d+)?|\.\d+)(?![\d])" + _EXP + r"?"
    r"(?:\s?/\s?(?P<den>" + _INT + r"(?:\.\d+)?)(?!\d|\.\d))?"
    r"(?P<pct>\s?(?:%|percent\b|per\s?cent\b))?"
)
MAX_EXPONENT = 100  # |exponent| of scientific notation; larger is not an answer


class Number:
    """A parsed number: exact value plus whether it was written as a percent."""

    __slots__ = ("value", "percent")

    def __init__(self, value: Fraction, percent: bool = False):
        self.value = value
        self.percent = percent

    def canonical(self) -> str:
        return format_fraction(self.value) + ("%" if self.percent else "")

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Number({self.canonical()})"


def format_fraction(v: Fraction) -> str:
    """``18`` / ``-0.25`` / ``1/3``: integers and terminating decimals exactly, else a reduced fraction."""
    if v.denominator == 1:
        return str(v.numerator)
    d = v.denominator
    while d % 2 == 0:
        d //= 2
    while d % 5 == 0:
        d //= 5
    if d != 1:
        return f"{v.numerator}/{v.denominator}"
    with localcontext() as ctx:
        ctx.prec = MAX_DIGITS * 3
        s = format(Decimal(v.numerator) / Decimal(v.denominator), "f")
    return s.rstrip("0").rstrip(".") if "." in s else s


def _to_fraction(s: str) -> Fraction | None:
    s = s.replace(",", "")
    if sum(c.isdigit() for c in s) > MAX_DIGITS:
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def _latex_frac(m: re.Match) -> str:
    """``\\frac{a}{b}`` / ``\\dfrac34`` -> ``a/b``; after a digit (``1\\frac{1}{2}``) a space first, so
    it reads as a mixed number."""
    lead, num, den = m.group(1), m.group(2) or m.group(3), m.group(4) or m.group(5)
    return f"{lead} {num}/{den}" if lead else f"{num}/{den}"


def _normalise_math(span: str) -> str:
    span = _LATEX_FRAC.sub(_latex_frac, span)
    span = _LATEX_WRAP.sub(r" \1", span)
    for a, b in (("{,}", ","), ("\\%", "%"), ("\\$", "$"), ("\\,", ""), ("\\!", ""), ("\\ ", " "),
                 ("\u2009", ""), ("\u202f", ""), ("\u2212", "-"), ("\u2044", "/"), ("\u2215", "/")):
        span = span.replace(a, b)
    return span


def iter_numbers(text: str) -> Iterator[Number]:
    """Numbers in ``text`` in order: signs (also the Unicode minus), ``$``, thousands separators,
    decimals, scientific notation (``1.2e4``, ``1.2 \\times 10^{4}``), ``a/b``, ``\\frac{a}{b}`` and
    ``\\dfrac34`` fractions, mixed numbers (``1 1/2``, ``1\\frac{1}{2}``: whole + a proper fraction),
    percents; trailing units are ignored."""
    for m in _NUMBER.finditer(_normalise_math(text)):
        v = _to_fraction(m.group("num"))
        if v is None:
            continue
        exp = m.group("exp") or m.group("exp10")
        if exp is not None:
            if abs(int(exp)) > MAX_EXPONENT:
                continue
            v = v * Fraction(10) ** int(exp)
        if m.group("den"):
            den = _to_fraction(m.group("den"))
            if den:  # a zero denominator leaves the numerator alone
                v = v / den
        whole = m.group("whole")
        if whole is not None:
            if m.group("den") and 0 <= v < 1:
                v = int(whole) + v
            else:  # not a proper fraction after it: the whole number stands alone, then the rest
                w = Fraction(int(whole))
                yield Number(-w if m.group("sign") == "-" else w)
                yield Number(v, percent=bool(m.group("pct")))
                continue
        if m.group("sign") and m.group("sign") != "+":
            v = -v
        yield Number(v, percent=bool(m.group("pct")))


def _first_number(span: str) -> Number | None:
    return next(iter_numbers(span), None)


def parse_number(value: Any) -> Number | None:
    """A gold/wrong value (``18``, ``"18.0"``, ``"1,000"``, ``"3/4"``, ``"25%"``) as a :class:`Number`."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return Number(Fraction(value))
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        return Number(Fraction(str(value)))
    if not isinstance(value, str):
        return None
    nums = list(iter_numbers(value))
    return nums[0] if len(nums) == 1 else None


def parse_numeric(text: str) -> str | None:
    """Final numeric answer: the last marker that holds a number, else the last number in the text."""
    text = _as_text(text)
    for span in reversed(final_answer_spans(text)):
        n = _first_number(span)
        if n is not None:
            return n.canonical()
    last = None
    for last in iter_numbers(text):
        pass
    return None if last is None else last.canonical()


def numbers_equal(a: Number, b: Number, *, rel_tol: Fraction = Fraction(1, 10 ** 6)) -> bool:
    """Equal up to formatting (``18.0 == 18``) and a 1e-6 relative tolerance. A percent equals its
    number (``25% == 25``) and, when only one side is a percent, its fraction too (``25% == 0.25``)."""
    def close(x: Fraction, y: Fraction) -> bool:
        return abs(x - y) <= rel_tol * max(Fraction(1), abs(y))

    if close(a.value, b.value):
        return True
    if a.percent and not b.percent:
        return close(a.value / 100, b.value)
    if b.percent and not a.percent:
        return close(a.value, b.value / 100)
    return False


# -- multiple choice ------------------------------------------------------------------------------------

_LETTER_SPAN = re.compile(r"^(?:(?i:option|choice|candidate)\s+)?[(\[]?\s*([A-Z])\s*[)\]]?(?![A-Za-z0-9])")
_LEADING_LABEL = re.compile(r"^\s*[(\[]?[A-Za-z][)\].:]\s+")
_WS = re.compile(r"\s+")


def choice_letters(choices: Any) -> list[str]:
    if isinstance(choices, dict):
        return [str(k).strip().upper() for k in choices]
    if isinstance(choices, (list, tuple)):
        return [chr(ord("A") + i) for i in range(min(len(choices), 26))]
    return ["A", "B", "C", "D", "E", "F"]  # when the options are not given


def choice_texts(choices: Any) -> dict[str, str]:
    """letter -> normalised option text (a leading ``"B) "`` label inside the text is dropped)."""
    if isinstance(choices, dict):
        items = [(str(k).strip().upper(), v) for k, v in choices.items()]
    elif isinstance(choices, (list, tuple)):
        items = list(zip(choice_letters(choices), choices))
    else:
        return {}
    return {k: _norm_text(_LEADING_LABEL.sub("", str(v))) for k, v in items if str(v).strip()}


def _norm_text(s: str) -> str:
    return _WS.sub(" ", s.lower()).strip().strip(".,;:!?*_`\"'()[] ")


# "A city called Kabul." / "I think ...": a bare A or I followed by a lower-case word is an English word, not an
# option, unless that word says something about the option ("A is correct").
_ARTICLE = re.compile(r"^[AI]\s+(?!(?:is|was|would|should|seems|looks|appears|it)\b)[a-z]")


def _mc_span(span: str, letters: Sequence[str], texts: dict[str, str]) -> str | None:
    s = _clean(span)
    m = _LETTER_SPAN.match(s)
    if m and m.group(1) in letters and not _ARTICLE.match(s):
        return m.group(1)
    if len(s.strip(".):(")) == 1 and s.strip(".):(").upper() in letters:  # a lone lowercase letter
        return s.strip(".):(").upper()
    norm = _norm_text(s)
    best = None
    for letter, t in texts.items():
        if t and (norm == t or norm.startswith(t + " ") or norm.startswith(t + ",")
                  or norm.startswith(t + ".")) and (best is None or len(t) > len(texts[best])):
            best = letter
    return best


def parse_multiple_choice(text: str, choices: Any = None) -> str | None:
    """Final option letter. ``choices``: list of option texts (lettered A, B, ...) or {letter: text}."""
    text = _as_text(text)
    letters, texts = choice_letters(choices), choice_texts(choices)
    v = _last_parse(text, lambda s: _mc_span(s, letters, texts))
    if v is not None:
        return v
    for cand in (text, _last_line(text)):  # a bare "B", "(B) Paris" or option text
        c = _clean(cand)
        if len(c) <= 200:
            v = _mc_span(c, letters, texts)
            if v is not None:
                return v
    return None


def normalize_choice_gold(gold: Any, choices: Any = None) -> str | None:
    if not isinstance(gold, str):
        return None
    letters, texts = choice_letters(choices), choice_texts(choices)
    g = gold.strip().strip("()[].")
    if g.upper() in letters and len(g) == 1:
        return g.upper()
    t = _norm_text(gold)
    for letter, txt in texts.items():
        if t == txt:
            return letter
    return None


# -- boolean --------------------------------------------------------------------------------------------

_BOOL = {"yes": "true", "true": "true", "no": "false", "false": "false"}
_BOOL_START = re.compile(r"^[\W_]*(yes|no|true|false)\b", re.IGNORECASE)
_BOOL_ANY = re.compile(r"\b(yes|no|true|false)\b", re.IGNORECASE)


def _bool_span(span: str) -> str | None:
    m = _BOOL_START.match(span)
    return _BOOL[m.group(1).lower()] if m else None


def parse_boolean(text: str) -> str | None:
    """Final yes/no/true/false as ``"true"``/``"false"``: last marker, else the last such word on the
    last line, else a leading yes/no."""
    text = _as_text(text)
    v = _last_parse(text, _bool_span)
    if v is not None:
        return v
    words = _BOOL_ANY.findall(_last_line(text))
    if words:
        return _BOOL[words[-1].lower()]
    return _bool_span(text)


def normalize_boolean_gold(gold: Any) -> str | None:
    if isinstance(gold, bool):
        return "true" if gold else "false"
    if isinstance(gold, str):
        return _BOOL.get(gold.strip().lower())
    return None


# -- Taste forks: the published runner's rule ----------------------------------------------------------

_FORK_LINE = re.compile(r"ANSWER:[ \t]*([A-Za-z])[ \t]*", re.IGNORECASE)


def parse_fork_answer(text: str, letters: Sequence[str] = FORK_LETTERS) -> str | None:
    """The published Taste-Bench runner's rule, exactly: the stripped response is a single valid letter
    (any case), or its last line is ``ANSWER: X`` (any case, X a valid letter, nothing after it on the
    line and no line after it). Anything else (``**ANSWER: B**``, ``ANSWER: (B)``, ``B is better``, an
    ``ANSWER:`` line followed by more text) is unparsed, and therefore wrong."""
    text = _as_text(text).strip()
    if len(text) == 1:
        return text.upper() if text.upper() in letters else None
    last = text.rsplit("\n", 1)[-1].strip()
    m = _FORK_LINE.fullmatch(last)
    return m.group(1).upper() if m and m.group(1).upper() in letters else None


# -- Med labels -----------------------------------------------------------------------------------------

_LABEL_WORDS = [  # longest first so "no significant difference" is not read as something shorter
    ("no statistically significant difference", "No Difference"),
    ("no significant difference", "No Difference"),
    ("no difference", "No Difference"),
    ("no-difference", "No Difference"),
    ("the same", "No Difference"),
    ("uncertain effect", "Uncertain"),
    ("insufficient data", "Uncertain"),
    ("insufficient evidence", "Uncertain"),
    ("uncertain", "Uncertain"),
    ("higher", "Higher"),
    ("lower", "Lower"),
]
_LABEL_START = re.compile(r"^[\W_]*(" + "|".join(re.escape(w) for w, _ in _LABEL_WORDS) + r")\b", re.IGNORECASE)
_LABEL_ANY = re.compile(r"\b(" + "|".join(re.escape(w) for w, _ in _LABEL_WORDS) + r")\b", re.IGNORECASE)
_LABEL_MAP = {w: l for w, l in _LABEL_WORDS}


def _label_span(span: str) -> str | None:
    m = _LABEL_START.match(span)
    return _LABEL_MAP[m.group(1).lower()] if m else None


def parse_label(text: str) -> str | None:
    """Final Higher / Lower / No Difference / Uncertain: last marker (``ANSWER: No Difference``), else a
    last line naming exactly one label."""
    text = _as_text(text)
    v = _last_parse(text, _label_span)
    if v is not None:
        return v
    found = {_LABEL_MAP[w.lower()] for w in _LABEL_ANY.findall(_last_line(text))}
    return found.pop() if len(found) == 1 else None


def normalize_label(value: Any, labels: Sequence[str] = MED_LABELS) -> str | None:
    if not isinstance(value, str):
        return None
    v = _WS.sub(" ", value.strip()).lower()
    for lab in labels:
        if v == lab.lower():
            return lab
    return None


# -- short text (a name: a city, a country) ---------------------------------------------------------------

_ARTICLE_WORDS = ("the", "a", "an")
_NON_WORD = re.compile(r"[\W_]+")
# Sentence ends: . ! ? followed by a space or the end (not after a capital letter, so "D.C." and "St." stay whole),
# or a line break.
_SENTENCE_END = re.compile(r"(?<![A-Z])[.!?](?=\s|$)|\n")
_CLAUSE_END = re.compile(r"[,;:(]")
_COPULA = re.compile(r"\b(?:is|are|was|would be|should be)\b", re.IGNORECASE)
_NO_ANSWER_WORDS = re.compile(r"\b(?:i don'?t know|i do not know|not sure|cannot|can'?t|unable|sorry|no information|"
                              r"unknown|not (?:possible|provided|given|mentioned))\b", re.IGNORECASE)
MAX_SHORT_ANSWER_CHARS = 80


def normalize_short_text(value: Any) -> str | None:
    """Case-folded, diacritics removed, punctuation turned to spaces, one leading article (the/a/an) dropped:
    ``"The Hague"`` -> ``"hague"``, ``"Bogotá"`` -> ``"bogota"``, ``"Côte d'Ivoire"`` -> ``"cote d ivoire"``."""
    if not isinstance(value, str):
        return None
    t = "".join(c for c in unicodedata.normalize("NFKD", value) if not unicodedata.combining(c))
    words = _NON_WORD.sub(" ", t.casefold()).split()
    if len(words) > 1 and words[0] in _ARTICLE_WORDS:
        words = words[1:]
    return " ".join(words) or None


def committed_span(text: str) -> str:
    """The part of a response that holds its answer: the text after the last final-answer marker that has any
    (``The answer is Sofia.``, ``Answer: Sofia``), else the response itself; cut at its first sentence end."""
    text = _as_text(text)
    span = next((s for s in reversed(final_answer_spans(text)) if _clean(s)), text)
    return _SENTENCE_END.split(_clean(span), 1)[0]


def _mentions(norm_span: str, candidates: Sequence[str]) -> list[tuple[int, int, str]]:
    """Whole-word occurrences ``(start, end, normalised candidate)`` of the candidates in a normalised span; an
    occurrence inside a longer one ("Guinea" inside "Equatorial Guinea") is dropped."""
    padded = f" {norm_span} "
    hits = []
    for c in candidates:
        n = normalize_short_text(c)
        if not n:
            continue
        start = padded.find(f" {n} ")
        while start != -1:
            hits.append((start, start + len(n) + 1, n))
            start = padded.find(f" {n} ", start + 1)
    return sorted(h for h in hits if not any(o[0] <= h[0] and h[1] <= o[1] and o[1] - o[0] > h[1] - h[0]
                                             for o in hits))


def parse_short_text(text: str, candidates: Sequence[str] = ()) -> str | None:
    """The name a response commits to, normalised (:func:`normalize_short_text`), or ``None`` (no answer).

    Rule (deterministic, never a similarity score): take the committed span (:func:`committed_span`: the text after
    the last final-answer marker, else the first sentence). Look for the known candidates (the gold, its aliases,
    the wrong value) in it as whole words after normalisation (a candidate inside a longer one does not count):
    the answer is the first candidate after the span's first copula (``is``/``are``/``was``: "Mumbai, India, is the
    capital of Bangladesh." -> ``"bangladesh"``), else the first candidate in the span ("Sofia is the capital of
    Bulgaria." -> ``"sofia"``). With no candidate in it the answer is outside the candidates: the first clause (up
    to a comma) after the first copula, or of the whole span, normalised ("The capital of Peru is Cusco." -> ``"cusco"``). A span that is
    empty, too long to be a name, or declines to answer ("I don't know") is no answer. Not understood: negation
    ("is not Plovdiv but Sofia" reads as Plovdiv), and a candidate inside a longer name that is not a candidate
    ("Guinea" in "Equatorial Guinea"; item builders avoid such candidates)."""
    span = committed_span(text)
    norm = normalize_short_text(span)
    if norm is None:
        return None
    parts = _COPULA.split(span, 1)
    tail = normalize_short_text(parts[-1]) if len(parts) == 2 else None
    hits = (_mentions(tail, candidates) if tail else []) or _mentions(norm, candidates)
    if hits:
        return hits[0][2]
    if _NO_ANSWER_WORDS.search(span):
        return None
    out = normalize_short_text(_CLAUSE_END.split(parts[-1], 1)[0]) or tail or norm  # its first clause
    return out if len(out) <= MAX_SHORT_ANSWER_CHARS else None


def _as_text(text: Any) -> str:
    return text if isinstance(text, str) else ("" if text is None else str(text))


# -- answer types: the registry ---------------------------------------------------------------------------

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
    - ``candidates(row) -> list``: the row's known answers (default: ``gold``, ``gold_aliases`` when
      ``aliases``, ``wrong_value``).
    - ``aliases``: rows of this type may carry ``gold_aliases`` (other names of the gold).
    - ``accepted``: what a valid gold looks like, for error messages.
    - ``budget``: the generation budget (new tokens) that fits a response (:func:`answer_budget`).
    - ``instruction``: the closing prompt line that makes a response parsable, for families that write the
      prompt (:func:`answer_instruction`); None = the family or the data writes it.

    A new answer type is one entry in :data:`ANSWER_TYPES` (with its functions beside it); nothing else
    compares answer-type names (a family lists the names it accepts)."""

    name: str
    parse: Callable[[str, Any, Sequence[str]], "str | None"]
    normalize: Callable[[Any, Any], "str | None"]
    accepted: str
    match: "Callable[[str, Any, Any], bool] | None" = None
    candidates: "Callable[[dict], list] | None" = None
    aliases: bool = False
    budget: int = REASONING_ANSWER_BUDGET
    instruction: str | None = None

    def matches(self, parsed: str, value: Any, choices: Any = None) -> bool:
        if self.match is not None:
            return self.match(parsed, value, choices)
        g = self.normalize(value, choices)
        return g is not None and parsed == g

    def known_answers(self, row: dict) -> list:
        if self.candidates is not None:
            return self.candidates(row)
        aliases = (row.get("gold_aliases") or []) if self.aliases else []
        return [v for v in (row.get("gold"), *aliases, row.get("wrong_value")) if v is not None]


def _numeric_match(parsed: str, value: Any, choices: Any = None) -> bool:
    a, b = parse_number(parsed), parse_number(value)
    return a is not None and b is not None and numbers_equal(a, b)


def _normalize_number(value: Any, choices: Any = None) -> str | None:
    n = parse_number(value)
    return None if n is None else n.canonical()


def _normalize_fork(value: Any, choices: Any = None) -> str | None:
    return value.strip().upper() if isinstance(value, str) and value.strip().upper() in FORK_LETTERS else None


_ANSWER_LINE = 'End your response with a final line of the form "ANSWER: {}".'

#: name -> :class:`AnswerType`: the only code that knows which answer types exist and what each one is.
ANSWER_TYPES: dict[str, AnswerType] = {t.name: t for t in (
    AnswerType(
        "multiple_choice", parse=lambda text, choices, cands: parse_multiple_choice(text, choices),
        normalize=normalize_choice_gold,
        accepted="an option letter (A, B, ...) within the choices, or the exact text of one choice",
        candidates=lambda row: choice_letters(row.get("choices")),  # any option is one of the row's answers
        instruction=_ANSWER_LINE.format("<letter>")),
    AnswerType(
        "numeric", parse=lambda text, choices, cands: parse_numeric(text), normalize=_normalize_number,
        match=_numeric_match, accepted="a number such as 18, -2.5, \"1,000\", \"3/4\" or \"25%\"",
        instruction=_ANSWER_LINE.format("<number>")),
    AnswerType(
        "boolean", parse=lambda text, choices, cands: parse_boolean(text),
        normalize=lambda value, choices=None: normalize_boolean_gold(value), accepted="true/false or \"yes\"/\"no\"",
        instruction='End your response with a final line of the form "ANSWER: yes" or "ANSWER: no".'),
    AnswerType(
        "choice", parse=lambda text, choices, cands: parse_fork_answer(text), normalize=_normalize_fork,
        accepted="A | B"),
    AnswerType(
        "label", parse=lambda text, choices, cands: parse_label(text),
        normalize=lambda value, choices=None: normalize_label(value), accepted="Higher | Lower | No Difference"),
    AnswerType(
        "short_text", parse=lambda text, choices, cands: parse_short_text(text, cands),
        normalize=lambda value, choices=None: normalize_short_text(value), aliases=True, budget=32,
        accepted="a non-empty name such as \"Sofia\" (matched after normalising case, diacritics and a leading "
                 "article)"),
)}


def answer_type(name: str) -> AnswerType:
    """The registered :class:`AnswerType` called ``name``; ``ValueError`` naming the accepted ones otherwise."""
    try:
        return ANSWER_TYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown answer_type {name!r}; accepted: {', '.join(ANSWER_TYPES)}") from None


# -- what callers use ------------------------------------------------------------------------------------

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


def answer_budget(answer_types: Sequence[str], *, toy: bool = False) -> int:
    """The generation budget that fits the answer formats ``answer_types`` (their largest :attr:`AnswerType.budget`;
    :data:`REASONING_ANSWER_BUDGET` for a name not registered); :data:`TOY_ANSWER_BUDGET` for the built-in tiny
    model."""
    if toy:
        return TOY_ANSWER_BUDGET
    return max((ANSWER_TYPES[t].budget if t in ANSWER_TYPES else REASONING_ANSWER_BUDGET for t in answer_types),
               default=REASONING_ANSWER_BUDGET)


def answer_instruction(answer_type_name: str) -> str:
    """The closing instruction that makes a response parsable (:attr:`AnswerType.instruction`); ``ValueError`` for
    a type without one."""
    instruction = answer_type(answer_type_name).instruction
    if instruction is None:
        raise ValueError(answer_type_name)
    return instruction


def answer_candidates(row: dict) -> list[str]:
    """A row's known answers that are text (:meth:`AnswerType.known_answers`: short_text: gold, ``gold_aliases``,
    ``wrong_value``; multiple choice: the option letters), handed to the parser."""
    return [v for v in answer_type(row["answer_type"]).known_answers(row) if isinstance(v, str)]


def answer_status(parsed: str | None, row: dict) -> str:
    """``no_answer`` (nothing parsed), ``candidate`` (one of the row's known answers: the gold, an alias or the
    wrong value; for multiple choice any option) or ``outside`` (an answer that is none of them)."""
    if parsed is None:
        return "no_answer"
    t = answer_type(row["answer_type"])
    if any(t.matches(parsed, v, row.get("choices")) for v in t.known_answers(row)):
        return "candidate"
    return "outside"


def parse_row_answer(text: str, row: dict) -> str | None:
    """:func:`parse_answer` with the row's own choices and candidates."""
    return parse_answer(text, row["answer_type"], choices=row.get("choices"), candidates=answer_candidates(row))


def row_answer_matches(parsed: str | None, row: dict, field: str = "gold") -> bool:
    """Whether ``parsed`` is the row's ``gold`` (with its ``gold_aliases``) or, with ``field="wrong_value"``, its
    wrong value."""
    aliases = row.get("gold_aliases") if field == "gold" else None
    return answers_match(parsed, row[field], row["answer_type"], choices=row.get("choices"), aliases=aliases)
