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
- short_text (a name: a city, a country): the normalised name the response commits to (``normalize_short_text``),
  or None for no answer and for a hedge (two candidates offered as alternatives: status ``hedged``); see
  ``read_short_text`` for the rule, eval_hooks/FORMATS.md for it in full.

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
from typing import Any, Callable, Iterator, NamedTuple, Sequence

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
#: Words that are never a name: a short_text gold, alias or wrong value equal to one (after normalisation) is refused
#: when the data loads (an alias "The" would match "It is the one in the west").
STOP_WORDS = frozenset((
    "the", "a", "an", "of", "and", "or", "in", "on", "at", "to", "from", "by", "for", "with", "as", "is", "are", "was",
    "be", "it", "its", "this", "that", "not", "no", "yes", "but", "if", "so", "one", "he", "she", "they", "we", "i",
    "you"))
_NON_WORD = re.compile(r"[\W_]+")
# Sentence ends: . ! ? followed by a space or the end, or a line break; not after a capital letter ("D.C.") or an
# abbreviation inside a name (_ABBREVIATIONS: "St. Petersburg", "Mt. Kenya", "Ft. Worth").
_SENTENCE_END = re.compile(r"(?<![A-Z])[.!?](?=\s|$)|\n")
_ABBREVIATIONS = frozenset(("st", "ste", "mt", "mts", "ft", "pt", "dr", "mr", "mrs", "ms", "jr", "sr", "prof", "gen",
                            "lt", "col", "capt", "sgt", "rev", "fr", "vs", "approx"))
_WORD_BEFORE = re.compile(r"(\w+)$")
#: Abbreviations inside names, read as the word they stand for ("St. Petersburg" = "Saint Petersburg").
_NAME_ABBREVIATIONS = {"st": "saint", "ste": "sainte", "mt": "mount", "ft": "fort"}
_CLAUSE_END = re.compile(r"[,;:(]")
_COPULA = re.compile(r"\b(?:is|are|was|would be|should be)\b", re.IGNORECASE)
_NO_ANSWER_WORDS = re.compile(
    r"\b(?:i don['’]?t know|i do not know|not sure|cannot|can['’]?t|unable|sorry|no information|unknown|"
    r"not (?:possible|provided|given|mentioned|able)|won['’]?t|will not|refuse|decline|as an ai)\b", re.IGNORECASE)
MAX_SHORT_ANSWER_CHARS = 80
MAX_SENTENCE_CHARS = 1000  # a sentence is read up to here (a short answer is far shorter; bounds the work)


def _accented_script(c: str) -> bool:
    """Latin and Greek letters, whose combining marks are accents (``á``, ``ç``, ``ά``) that a name is matched
    without."""
    return c < "\u0250" or unicodedata.name(c, "").startswith(("LATIN", "GREEK"))


def _strip_accents(value: str) -> str:
    """NFKD, the combining marks on Latin and Greek letters dropped (``Bogotá`` -> ``Bogota``), then NFC: a letter
    of another script keeps its marks, so no base character changes (``パリ`` stays ``パリ``, not ``ハリ``; ``й``
    stays ``й``)."""
    out: list[str] = []
    for c in unicodedata.normalize("NFKD", value):
        if unicodedata.combining(c) and out and _accented_script(out[-1]):
            continue
        out.append(c)
    return unicodedata.normalize("NFC", "".join(out))


def normalize_short_text(value: Any) -> str | None:
    """Case-folded, accents removed from Latin and Greek letters, punctuation turned to spaces, the abbreviations
    St/Ste/Mt/Ft read as Saint/Sainte/Mount/Fort, one leading article (the/a/an) dropped: ``"The Hague"`` ->
    ``"hague"``, ``"St. Petersburg"`` -> ``"saint petersburg"``, ``"Bogotá"`` -> ``"bogota"``, ``"Côte d'Ivoire"`` ->
    ``"cote d ivoire"``; letters of other scripts are kept whole (``"パリ"`` -> ``"パリ"``, ``"Київ"`` -> ``"київ"``)."""
    if not isinstance(value, str):
        return None
    words = [_NAME_ABBREVIATIONS.get(w, w) for w in _NON_WORD.sub(" ", _strip_accents(value).casefold()).split()]
    if len(words) > 1 and words[0] in _ARTICLE_WORDS:
        words = words[1:]
    return " ".join(words) or None


def normalize_short_text_value(value: Any) -> str | None:
    """A gold, alias or wrong value: :func:`normalize_short_text`, or None (invalid) for a stop word
    (:data:`STOP_WORDS`: ``"The"``, ``"of"``, ...), which is no name."""
    n = normalize_short_text(value)
    return None if n in STOP_WORDS else n


def _sentences(span: str) -> list[str]:
    """``span`` cut at sentence ends (:data:`_SENTENCE_END`, not after an abbreviation of :data:`_ABBREVIATIONS`);
    a piece that ends with a colon or a copula ("The capital of France is:") is joined with the next non-empty one,
    so an answer after a colon or a line break is read through."""
    pieces, start = [], 0
    for m in _SENTENCE_END.finditer(span):
        before = _WORD_BEFORE.search(span[max(0, m.start() - 8):m.start()])
        if m.group() == "." and before and before.group(1).casefold() in _ABBREVIATIONS:
            continue
        pieces.append(span[start:m.end()])
        start = m.end()
    pieces.append(span[start:])
    out: list[str] = []
    for piece in (p.strip() for p in pieces):
        if not piece.strip(".!? \t"):
            continue
        if out and re.search(r"(?::|\b(?:is|are|was))\s*$", out[-1], re.IGNORECASE):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


# Tokens of a folded sentence: words, and the punctuation marks that end a clause.
_TOKEN = re.compile(r"[^\W_]+|[,;:()\[\]—–]|\s-\s")
_CLAUSE_WORDS = frozenset(("but", "while", "whereas", "although", "though", "however", "yet", "unlike", "besides",
                           "except"))
_ASIDE_OPENERS = frozenset(("while", "whereas", "although", "though", "unlike", "besides", "except"))
_NEGATIONS = frozenset(("not", "never", "nor", "neither"))
_NEGATION_PHRASES = (("rather", "than"), ("instead", "of"), ("as", "opposed", "to"), ("other", "than"))
_NT_VERBS = frozenset(("isn", "wasn", "aren", "weren", "doesn", "don", "didn", "can", "couldn", "won", "wouldn", "ain"))
_COPULA_WORDS = frozenset(("is", "was", "are", "were", "be"))
_WRONG_WORDS = frozenset(("wrong", "incorrect", "false", "mistaken", "inaccurate", "untrue", "erroneous", "mistake",
                          "error"))
_NOT_THE_ANSWER = frozenset(("capital", "answer", "correct", "right", "true"))
_CORRECTIONS = (("no", "wait"), ("wait",), ("no", "actually"), ("no",), ("sorry",), ("correction",), ("i", "mean"),
                ("i", "meant"), ("or", "rather"), ("rather",), ("scratch", "that"), ("my", "mistake"), ("oops",))


class _Sentence:
    """A sentence (or the part after a self-correction) as folded words with their clause numbers."""

    def __init__(self, text: str):
        text = text[:MAX_SENTENCE_CHARS]
        self.words: list[str] = []
        self.clause: list[int] = []
        self.after_mark: list[bool] = []  # the word follows a clause mark directly
        clause, marked = 0, True
        for m in _TOKEN.finditer(_strip_accents(text).casefold()):  # "isn't" -> isn, t
            tok = m.group().strip()
            if not tok[0].isalnum():
                clause, marked = clause + 1, True
                continue
            if tok in _CLAUSE_WORDS and self.words:
                clause += 1
            self.words.append(_NAME_ABBREVIATIONS.get(tok, tok))
            self.clause.append(clause)
            self.after_mark.append(marked)
            marked = False

    def starts_with(self, i: int, phrase: tuple[str, ...]) -> bool:
        return tuple(self.words[i:i + len(phrase)]) == phrase

    def negated(self, i: int) -> bool:
        """A negation in the clause of word ``i``, before it ("not Lyon", "isn't Lyon", "rather than Lyon")."""
        c, j = self.clause[i], i - 1
        while j >= 0 and self.clause[j] == c:
            w = self.words[j]
            if w in _NEGATIONS or (w == "t" and j > 0 and self.words[j - 1] in _NT_VERBS):
                return True
            if any(self.starts_with(j, p) and j + len(p) <= i for p in _NEGATION_PHRASES):
                return True
            j -= 1
        return False

    def called_wrong(self, end: int) -> bool:
        """The words after a mention (ending at ``end``), in its clause, say it is wrong: "Lyon is wrong",
        "Lyon is not the capital", "Lyon isn't correct"."""
        c = self.clause[end - 1]
        rest = [w for k, w in enumerate(self.words[end:end + 6], start=end) if self.clause[k] == c]
        if rest[:1] and rest[0] in _COPULA_WORDS | {"s"}:
            rest = rest[1:]
        elif rest[:2] and rest[0] in _NT_VERBS and rest[1] == "t":
            rest = ["not", *rest[2:]]
        if rest[:1] and rest[0] in _WRONG_WORDS:
            return True
        if rest[:1] == ["not"]:
            rest = [w for w in rest[1:] if w not in _ARTICLE_WORDS]
            return not rest or rest[0] in _NOT_THE_ANSWER
        return rest[:2] in (["a", "mistake"], ["an", "error"])

    def set_aside(self, i: int, end: int) -> bool:
        """The mention ``words[i:end]`` is not offered as the answer: negated, called wrong, or inside an aside
        clause ("while Lyon is a major city", "although the note says Lyon", "unlike Lyon")."""
        first = next(k for k in range(i + 1) if self.clause[k] == self.clause[i])
        return self.negated(i) or self.called_wrong(end) or self.words[first] in _ASIDE_OPENERS

    def correction_at(self, i: int) -> int:
        """The length of a self-correction marker at word ``i``, else 0: a phrase ("no wait", "i mean", "or
        rather") anywhere; a single word ("no", "wait", "sorry") only where it opens a clause, and a bare "no" only
        when a clause mark follows it ("No, it is Paris", not "No other city")."""
        for p in _CORRECTIONS:
            if not self.starts_with(i, p) or (len(p) == 1 and not self.after_mark[i]):
                continue
            if p == ("no",) and i + 1 < len(self.words) and not self.after_mark[i + 1]:
                continue
            return len(p)
        return 0


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


def _read_clauses(s: _Sentence, start: int, names) -> ShortTextReading | None:
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
    return ShortTextReading((after or kept)[0][3], "answer")


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


def _read_sentence(s: _Sentence, names, start: int = 0) -> ShortTextReading | None:
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
    text = _as_text(text)
    return next((s for s in reversed(final_answer_spans(text)) if _clean(s)), text)


def read_short_text(text: str, candidates: Sequence[Any] = ()) -> ShortTextReading:
    """What a response commits to, as ``(answer, status)`` (:class:`ShortTextReading`); ``candidates``: the row's
    known answers, each a name or a tuple of the names of one answer (``("Kyiv", "Kiev")``).

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
    sentences = _sentences(_clean(_answer_source(text)))
    if not sentences:
        return _NONE
    first = next((k for k, s in enumerate(sentences) if not s.endswith("?")), 0)
    reading = _read_sentence(_Sentence(sentences[first]), names) or _outside_answer(sentences[first])
    for text_ in sentences[first + 1:]:
        s = _Sentence(text_)
        n = s.correction_at(0) if s.words else 0
        corrected = _read_sentence(s, names, n) if n else None
        if corrected is not None:
            reading = corrected
    return reading


def parse_short_text(text: str, candidates: Sequence[Any] = ()) -> str | None:
    """The name a response commits to, normalised (:func:`normalize_short_text`), or ``None`` (no answer, or a
    hedge): :func:`read_short_text`'s answer."""
    return read_short_text(text, candidates).answer


def short_text_unanswered(text: str, choices: Any, candidates: Sequence[Any]) -> str:
    """Why a short_text response has no answer: ``hedged`` (two candidates offered as alternatives) or
    ``no_answer``."""
    return "hedged" if read_short_text(text, candidates).status == "hedged" else "no_answer"


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
    - ``candidates(row) -> list[tuple]``: the row's known answers, each a tuple of the names of one answer
      (default: ``(gold, *gold_aliases)`` (the aliases when ``aliases``), ``(wrong_value,)``).
    - ``unanswered(text, choices, candidates) -> str``: the status of a response that has no answer (default
      ``no_answer``; short_text: ``hedged`` for two candidates offered as alternatives).
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
    candidates: "Callable[[dict], list[tuple]] | None" = None
    unanswered: "Callable[[str, Any, Sequence[Any]], str] | None" = None
    aliases: bool = False
    budget: int = REASONING_ANSWER_BUDGET
    instruction: str | None = None

    def matches(self, parsed: str, value: Any, choices: Any = None) -> bool:
        if self.match is not None:
            return self.match(parsed, value, choices)
        g = self.normalize(value, choices)
        return g is not None and parsed == g

    def known_answers(self, row: dict) -> list[tuple]:
        if self.candidates is not None:
            return self.candidates(row)
        aliases = (row.get("gold_aliases") or []) if self.aliases else []
        groups = [(row.get("gold"), *aliases), (row.get("wrong_value"),)]
        return [g for g in (tuple(v for v in group if v is not None) for group in groups) if g]


def _numeric_match(parsed: str, value: Any, choices: Any = None) -> bool:
    a, b = parse_number(parsed), parse_number(value)
    if a is None or b is None:  # a canonical form longer than MAX_DIGITS ("1E100") does not parse back: as written
        return parsed == value or parsed == _normalize_number(value)
    return numbers_equal(a, b)


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
        candidates=lambda row: [(c,) for c in choice_letters(row.get("choices"))],  # any option is an answer
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
        normalize=lambda value, choices=None: normalize_short_text_value(value), aliases=True, budget=32,
        unanswered=short_text_unanswered,
        accepted="a non-empty name such as \"Sofia\", not an article or stop word such as \"The\" (matched after "
                 "normalising case, Latin diacritics and a leading article)"),
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


def answer_candidates(row: dict) -> list[tuple[str, ...]]:
    """A row's known answers, each a tuple of its names that are text (:meth:`AnswerType.known_answers`:
    short_text: ``(gold, *gold_aliases)``, ``(wrong_value,)``; multiple choice: the option letters), handed to the
    parser."""
    groups = (tuple(v for v in g if isinstance(v, str)) for g in answer_type(row["answer_type"]).known_answers(row))
    return [g for g in groups if g]


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


def parse_row_answer(text: str, row: dict) -> str | None:
    """:func:`parse_answer` with the row's own choices and candidates."""
    return parse_answer(text, row["answer_type"], choices=row.get("choices"), candidates=answer_candidates(row))


def row_answer_matches(parsed: str | None, row: dict, field: str = "gold") -> bool:
    """Whether ``parsed`` is the row's ``gold`` (with its ``gold_aliases``) or, with ``field="wrong_value"``, its
    wrong value."""
    aliases = row.get("gold_aliases") if field == "gold" else None
    return answers_match(parsed, row[field], row["answer_type"], choices=row.get("choices"), aliases=aliases)
