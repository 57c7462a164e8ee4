"""Final-answer markers and the helpers every parser shares (:mod:`eval_hooks.parsers`).

A *final-answer marker* is one of ``\\boxed{...}``, ``#### X``, ``... answer is X``, ``Answer: X`` / ``Final answer: X`` /
``ANSWER: X`` (any case, Markdown bold allowed); :func:`final_answer_spans` gives the text after each one, in order,
and :func:`last_parse` applies the rule shared by all parsers: the last marker whose text parses wins. Pure functions
of strings; none raises on any input."""

from __future__ import annotations

import re
from typing import Any, Callable

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


def last_parse(text: str, parse_span: Callable[[str], "str | None"]) -> str | None:
    """The first non-None ``parse_span(span)`` over :func:`final_answer_spans` from the last to the first, else None."""
    for span in reversed(final_answer_spans(text)):
        v = parse_span(span)
        if v is not None:
            return v
    return None


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` ("" when there is none)."""
    for line in reversed(text.strip().split("\n")):
        if line.strip():
            return line
    return ""


def clean_span(span: str) -> str:
    """``span`` without surrounding whitespace, quotes, backticks and Markdown emphasis."""
    return span.strip().strip("*_`\"'“”‘’ \t").strip()


def as_text(text: Any) -> str:
    """A response as a string: None -> "", a non-string -> ``str(text)``."""
    return text if isinstance(text, str) else ("" if text is None else str(text))
