"""The numeric answer type: numbers as written in answers (signs, thousands separators, decimals, fractions, LaTeX,
mixed numbers, percents, scientific notation) read exactly as :class:`~fractions.Fraction`, and compared up to a 1e-6
relative tolerance. Canonical form: an integer (``"18"``), an exact decimal (``"0.25"``) or a reduced fraction
(``"1/3"``), with a trailing ``%`` if the answer was written as a percent."""

from __future__ import annotations

import re
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, Iterator

from .base import ANSWER_LINE, AnswerType
from .markers import as_text, final_answer_spans

MAX_DIGITS = 60  # longer digit runs are not answers (and would hit int() limits)

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
    text = as_text(text)
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


def numeric_match(parsed: str, value: Any, choices: Any = None) -> bool:
    """Whether a parsed numeric answer is ``value`` (:func:`numbers_equal`; as written when either side does not
    parse back)."""
    a, b = parse_number(parsed), parse_number(value)
    if a is None or b is None:  # a canonical form longer than MAX_DIGITS ("1E100") does not parse back: as written
        return parsed == value or parsed == normalize_number(value)
    return numbers_equal(a, b)


def normalize_number(value: Any, choices: Any = None) -> str | None:
    """The canonical form of a gold or wrong number, or None when it is not one number."""
    n = parse_number(value)
    return None if n is None else n.canonical()


def numeric_leak(text: str, gold: Any, choices: Any = None) -> str | None:
    """What in ``text`` reveals the numeric ``gold``: any number equal to its value (``1,000`` = ``1000`` =
    ``1000.0``), or the gold's text itself; None when nothing does (or the gold is no number)."""
    g = parse_number(gold)
    if g is None:
        return None
    for n in iter_numbers(text):
        if numbers_equal(n, g):
            return f"states the gold value {g.canonical()}"
    if str(gold).strip() and str(gold).strip() in text:
        return f"contains the gold text {str(gold).strip()!r}"
    return None


NUMERIC = AnswerType(
    "numeric", parse=lambda text, choices, cands: parse_numeric(text), normalize=normalize_number,
    match=numeric_match, accepted="a number such as 18, -2.5, \"1,000\", \"3/4\" or \"25%\"",
    instruction=ANSWER_LINE.format("<number>"), same=lambda a, b: numeric_match(a, b), leak=numeric_leak)
