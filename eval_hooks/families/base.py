"""What every family shares: field checks that raise :class:`DataError` with file/line/field, the
row-file validator, and scoring one row."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..io import DataError
from ..parsers import answers_match, normalize_gold, parse_answer

ROW_CORE = ("row_id", "item_id", "condition", "prompt", "gold", "answer_type")


class Ctx:
    """Where a record came from, for error messages."""

    __slots__ = ("path", "line")

    def __init__(self, path: str | Path | None, line: int | None):
        self.path, self.line = path, line

    def error(self, problem: str, field: str | None = None, accepted: str | None = None) -> DataError:
        return DataError(problem, path=self.path, line=self.line, field=field, accepted=accepted)


def require(rec: dict, field: str, ctx: Ctx, *, accepted: str) -> Any:
    if field not in rec or rec[field] is None:
        raise ctx.error("missing required field", field, accepted)
    return rec[field]


def req_str(rec: dict, field: str, ctx: Ctx, *, accepted: str = "a non-empty string") -> str:
    v = require(rec, field, ctx, accepted=accepted)
    if not isinstance(v, str) or not v.strip():
        raise ctx.error(f"expected a non-empty string, got {_show(v)}", field, accepted)
    return v


def req_item_id(rec: dict, ctx: Ctx) -> str:
    v = require(rec, "item_id", ctx, accepted="a non-empty string or an integer")
    if isinstance(v, bool) or not isinstance(v, (str, int)) or (isinstance(v, str) and not v.strip()):
        raise ctx.error(f"expected a non-empty string or an integer, got {_show(v)}", "item_id",
                        "a non-empty string or an integer")
    return str(v)


def items_once(records, path):
    """Yield ``(ctx, record, item_id)`` for item-per-line families, rejecting a repeated ``item_id``."""
    seen: dict[str, int] = {}
    for line, rec in records:
        ctx = Ctx(path, line)
        item_id = req_item_id(rec, ctx)
        if item_id in seen:
            raise ctx.error(f"duplicate item_id {item_id!r} (first on line {seen[item_id]})", "item_id",
                            "each item_id once per file")
        seen[item_id] = line
        yield ctx, rec, item_id


def req_choice(rec: dict, field: str, ctx: Ctx, allowed: Sequence[str]) -> str:
    accepted = " | ".join(allowed)
    v = require(rec, field, ctx, accepted=accepted)
    if v not in allowed:
        raise ctx.error(f"unknown value {_show(v)}", field, accepted)
    return v


def req_str_list(rec: dict, field: str, ctx: Ctx, *, allow_empty: bool = False) -> list[str]:
    accepted = "a list of non-empty strings" + ("" if allow_empty else " (at least one)")
    v = require(rec, field, ctx, accepted=accepted)
    if not isinstance(v, list) or (not v and not allow_empty):
        raise ctx.error(f"expected a list of strings, got {_show(v)}", field, accepted)
    for i, s in enumerate(v):
        if not isinstance(s, str) or not s.strip():
            raise ctx.error(f"element {i} is {_show(s)}", field, accepted)
    return list(v)


def check_choices(rec: dict, ctx: Ctx) -> Any:
    """Optional ``choices``: a list of >= 2 option texts (lettered A, B, ...) or {letter: text}."""
    accepted = 'a list of at least 2 option strings, or an object {"A": text, "B": text, ...}'
    v = rec.get("choices")
    if v is None:
        return None
    if isinstance(v, list):
        ok = len(v) >= 2 and all(isinstance(s, str) and s.strip() for s in v) and len(v) <= 26
    elif isinstance(v, dict):
        ok = len(v) >= 2 and all(isinstance(k, str) and len(k.strip()) == 1 and k.strip().isalpha()
                                 and isinstance(t, str) for k, t in v.items())
    else:
        ok = False
    if not ok:
        raise ctx.error(f"invalid choices {_show(v)}", "choices", accepted)
    return v


ANSWER_ACCEPTED = {
    "numeric": "a number such as 18, -2.5, \"1,000\", \"3/4\" or \"25%\"",
    "multiple_choice": "an option letter (A, B, ...) within the choices, or the exact text of one choice",
    "boolean": "true/false or \"yes\"/\"no\"",
    "choice": "A | B",
    "label": "Higher | Lower | No Difference",
    "short_text": "a non-empty name such as \"Sofia\" (matched after normalising case, diacritics and a leading article)",
}


def check_gold(value: Any, answer_type: str, ctx: Ctx, *, field: str = "gold", choices: Any = None) -> str:
    g = normalize_gold(value, answer_type, choices=choices)
    if g is None:
        raise ctx.error(f"{_show(value)} is not a valid {answer_type} answer", field, ANSWER_ACCEPTED[answer_type])
    return g


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def copy_extras(rec: dict, row: dict, known: set[str], ctx: Ctx) -> None:
    """Copy every input field the family does not consume onto ``row`` (for slicing); refuse a field
    that would overwrite a generated row field."""
    for k, v in rec.items():
        if k in known:
            continue
        if k in row:
            raise ctx.error("extra field collides with a generated row field of the same name", k,
                            "any other field name (generated: " + ", ".join(sorted(row)) + ")")
        row[k] = v


class Family:
    """A benchmark family: how an items file is validated and expanded into rows, and how a response
    to a row is scored. Subclasses set ``name``, ``conditions`` (or ``is_condition``) and implement
    ``expand_records``."""

    name: str = ""
    answer_types: tuple[str, ...] = ()
    #: row fields (beyond ROW_CORE) the metrics need; checked when a rows file is read back
    row_fields: tuple[str, ...] = ()

    def is_condition(self, c: Any) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    condition_accepted: str = ""

    def configured(self, **options: Any) -> "Family":
        """A copy of this family with loading options (only Taste has any: ``max_prompt_tokens``,
        ``count_tokens``). Options that are all None return the family itself."""
        given = {k: v for k, v in options.items() if v is not None}
        if given:
            raise ValueError(f"family {self.name!r} takes no loading options, got {sorted(given)}")
        return self

    def expand_records(self, records: list[tuple[int, dict]], path) -> list[dict]:  # pragma: no cover
        raise NotImplementedError

    # -- rows files written by `expand` (read back by `score`) ---------------------------------------
    def validate_rows(self, records: list[tuple[int, dict]], path) -> list[dict]:
        seen: dict[str, int] = {}
        rows = []
        for line, rec in records:
            ctx = Ctx(path, line)
            for f in ROW_CORE + self.row_fields:
                if f not in rec:
                    raise ctx.error("missing required row field", f,
                                    "rows as written by `python -m eval_hooks expand`, with "
                                    + ", ".join(ROW_CORE + self.row_fields))
            rid = rec["row_id"]
            if not isinstance(rid, str) or not rid:
                raise ctx.error(f"expected a non-empty string, got {_show(rid)}", "row_id", "a non-empty string")
            if rid in seen:
                raise ctx.error(f"duplicate row_id {rid!r} (first on line {seen[rid]})", "row_id", "unique row ids")
            seen[rid] = line
            if not self.is_condition(rec["condition"]):
                raise ctx.error(f"unknown condition {_show(rec['condition'])}", "condition", self.condition_accepted)
            at = rec["answer_type"]
            if at not in self.answer_types:
                raise ctx.error(f"unknown answer type {_show(at)}", "answer_type", " | ".join(self.answer_types))
            if not isinstance(rec["prompt"], str):
                raise ctx.error(f"expected a string, got {_show(rec['prompt'])}", "prompt", "a string")
            check_gold(rec["gold"], at, ctx, choices=rec.get("choices"))
            rows.append(dict(rec))
        return rows

    # -- scoring -------------------------------------------------------------------------------------
    def score_row(self, row: dict, response: str) -> dict:
        at = row["answer_type"]
        parsed = parse_answer(response, at, choices=row.get("choices"))
        out = {k: v for k, v in row.items() if k not in ("prompt", "messages")}
        out.update(response=response, parsed=parsed, parse_ok=parsed is not None,
                   correct=answers_match(parsed, row["gold"], at, choices=row.get("choices")))
        return out


def answer_instruction(answer_type: str, choices: Any = None) -> str:
    """The closing instruction that makes a response parsable for this answer type."""
    if answer_type == "numeric":
        return 'End your response with a final line of the form "ANSWER: <number>".'
    if answer_type == "boolean":
        return 'End your response with a final line of the form "ANSWER: yes" or "ANSWER: no".'
    if answer_type == "multiple_choice":
        return 'End your response with a final line of the form "ANSWER: <letter>".'
    raise ValueError(answer_type)


def render_choices(choices: Any) -> str:
    if isinstance(choices, dict):
        pairs = [(str(k).strip().upper(), v) for k, v in choices.items()]
    else:
        pairs = [(chr(ord("A") + i), v) for i, v in enumerate(choices)]
    return "\n".join(f"{k}. {v}" for k, v in pairs)
