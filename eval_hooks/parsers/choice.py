"""The answer types with a closed set of answers: multiple choice (an option letter), boolean (``"true"`` /
``"false"``), Taste-Bench's fork letter (``choice``: :data:`FORK_LETTERS` under the published runner's rule,
:func:`parse_fork_answer`) and MedCounterfact's label (``label``: one of :data:`MED_LABELS`, :func:`parse_label`,
:func:`normalize_label`). The two families' letters and labels live here, below the families that use them
(docs/architecture.md#eval_hooks-in-rooms)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from .base import ANSWER_LINE, AnswerType
from .markers import as_text, clean_span, last_line, last_parse

# -- multiple choice ------------------------------------------------------------------------------------

_LETTER_SPAN = re.compile(r"^(?:(?i:option|choice|candidate)\s+)?[(\[]?\s*([A-Z])\s*[)\]]?(?![A-Za-z0-9])")
_LEADING_LABEL = re.compile(r"^\s*[(\[]?[A-Za-z][)\].:]\s+")
_WS = re.compile(r"\s+")


def choice_letters(choices: Any) -> list[str]:
    """The option letters of ``choices`` ({letter: text} keys, A, B, ... for a list; A-F when not given)."""
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
    s = clean_span(span)
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
    text = as_text(text)
    letters, texts = choice_letters(choices), choice_texts(choices)
    v = last_parse(text, lambda s: _mc_span(s, letters, texts))
    if v is not None:
        return v
    for cand in (text, last_line(text)):  # a bare "B", "(B) Paris" or option text
        c = clean_span(cand)
        if len(c) <= 200:
            v = _mc_span(c, letters, texts)
            if v is not None:
                return v
    return None


def normalize_choice_gold(gold: Any, choices: Any = None) -> str | None:
    """A gold option as its letter (a letter of ``choices``, or the exact text of one option), else None."""
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
    text = as_text(text)
    v = last_parse(text, _bool_span)
    if v is not None:
        return v
    words = _BOOL_ANY.findall(last_line(text))
    if words:
        return _BOOL[words[-1].lower()]
    return _bool_span(text)


def normalize_boolean_gold(gold: Any) -> str | None:
    """A gold boolean (``True``, ``"yes"``, ``"false"``, ...) as ``"true"`` / ``"false"``, else None."""
    if isinstance(gold, bool):
        return "true" if gold else "false"
    if isinstance(gold, str):
        return _BOOL.get(gold.strip().lower())
    return None


# -- Taste forks: the published runner's rule ----------------------------------------------------------

_FORK_LINE = re.compile(r"ANSWER:[ \t]*([A-Za-z])[ \t]*", re.IGNORECASE)


def parse_fork_answer(text: str, letters: Sequence[str]) -> str | None:
    """The published Taste-Bench runner's rule, exactly: the stripped response is a single valid letter
    (any case), or its last line is ``ANSWER: X`` (any case, X a valid letter, nothing after it on the
    line and no line after it). Anything else (``**ANSWER: B**``, ``ANSWER: (B)``, ``B is better``, an
    ``ANSWER:`` line followed by more text) is unparsed, and therefore wrong."""
    text = as_text(text).strip()
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
    text = as_text(text)
    v = last_parse(text, _label_span)
    if v is not None:
        return v
    found = {_LABEL_MAP[w.lower()] for w in _LABEL_ANY.findall(last_line(text))}
    return found.pop() if len(found) == 1 else None


def normalize_label(value: Any, labels: Sequence[str]) -> str | None:
    """``value`` as the one of ``labels`` it names (case and inner spaces ignored), else None."""
    if not isinstance(value, str):
        return None
    v = _WS.sub(" ", value.strip()).lower()
    for lab in labels:
        if v == lab.lower():
            return lab
    return None


def normalize_fork(value: Any, letters: Sequence[str]) -> str | None:
    """A gold fork letter in canonical form (stripped, upper case) when it is one of ``letters``, else None."""
    return value.strip().upper() if isinstance(value, str) and value.strip().upper() in letters else None


def choice_leak(text: str, gold: Any, choices: Any = None) -> str | None:
    """What in ``text`` reveals the gold option: its option text, or "answer/option/choice (is) <letter>"; None when
    nothing does (or the gold is no option)."""
    letter = normalize_choice_gold(gold, choices)
    if letter is None:
        return None
    option = choice_texts(choices).get(letter) if choices is not None else None
    if option and len(option.strip()) > 2 and option.strip().lower() in text.lower():
        return f"contains the gold option text {option.strip()!r}"
    if re.search(rf"\b(answer|option|choice)\s*(is|:)?\s*\(?{letter}\)?(?![\w])", text, re.I):
        return f"names the gold option {letter}"
    return None


def boolean_leak(text: str, gold: Any, choices: Any = None) -> str | None:
    """What in ``text`` reveals the boolean gold: "answer (is|:) yes/no" (or true/false) stating it, else None."""
    g = normalize_boolean_gold(gold)
    words = ("yes", "true") if g == "true" else ("no", "false")
    if re.search(rf"\banswer\s*(is|:)\s*({'|'.join(words)})\b", text, re.I):
        return f"states the gold answer {g}"
    return None


MULTIPLE_CHOICE = AnswerType(
    "multiple_choice", parse=lambda text, choices, cands: parse_multiple_choice(text, choices),
    normalize=normalize_choice_gold,
    accepted="an option letter (A, B, ...) within the choices, or the exact text of one choice",
    candidates=lambda row: [(c,) for c in choice_letters(row.get("choices"))],  # any option is an answer
    instruction=ANSWER_LINE.format("<letter>"), leak=choice_leak)

BOOLEAN = AnswerType(
    "boolean", parse=lambda text, choices, cands: parse_boolean(text),
    normalize=lambda value, choices=None: normalize_boolean_gold(value), accepted="true/false or \"yes\"/\"no\"",
    instruction='End your response with a final line of the form "ANSWER: yes" or "ANSWER: no".', leak=boolean_leak)


#: Taste-Bench's two branches of a fork, as the runner's ``ANSWER: X`` line names them.
FORK_LETTERS = ("A", "B")

#: The ``choice`` answer type (Taste): a fork letter under the runner's rule, a gold one of :data:`FORK_LETTERS`.
FORK_ANSWER = AnswerType(
    "choice", parse=lambda text, choices, cands: parse_fork_answer(text, FORK_LETTERS),
    normalize=lambda value, choices=None: normalize_fork(value, FORK_LETTERS), accepted="A | B")

#: The labels a MedCounterfact answer can take, in scoring order (``score_labels``, the label probabilities).
MED_LABELS = ("Higher", "Lower", "No Difference", "Uncertain")

#: The ``label`` answer type (Med): the last label a response names (:func:`parse_label`), a gold one of
#: :data:`MED_LABELS`.
LABEL_ANSWER = AnswerType(
    "label", parse=lambda text, choices, cands: parse_label(text),
    normalize=lambda value, choices=None: normalize_label(value, MED_LABELS), accepted="Higher | Lower | No Difference")
