"""What every family shares: field checks that raise :class:`DataError` with file/line/field, and the
:class:`Family` contract with its generic parts (the row-file validator, scoring one row, the report
shell, the generic run and the one atomic write-and-publish)."""

from __future__ import annotations

import sys

from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from selectrust.core.io import DataError, read_records
from ..parsers import answer_instruction as _answer_instruction
from ..parsers import answer_type as _answer_type
from ..parsers import answers_match, normalize_gold, parse_answer
from ..scoring import check_responses, generate_responses, generation_warnings, publish_outputs

ROW_CORE = ("row_id", "item_id", "condition", "prompt", "gold", "answer_type")
#: the generation budget per row of a family without one of its own (:meth:`Family.default_max_new_tokens`)
DEFAULT_MAX_NEW_TOKENS = 256


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


def check_gold(value: Any, answer_type: str, ctx: Ctx, *, field: str = "gold", choices: Any = None) -> str:
    g = normalize_gold(value, answer_type, choices=choices)
    if g is None:
        raise ctx.error(f"{_show(value)} is not a valid {answer_type} answer", field,
                        _answer_type(answer_type).accepted)
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
    """An evaluation family: everything one benchmark is, in one object.

    - items: ``expand_records`` (items -> rows, validated), ``validate_rows`` (a rows file written by
      ``expand``, read back), ``load`` (a file of either), ``eval_rows`` (the rows the ``eval`` config
      group names);
    - scoring: ``score_row`` (one response -> one line of ``item_scores.jsonl``);
    - ``metrics`` (item scores -> the family's part of ``metrics.json``) and ``headline`` (the flat
      numbers trainers and :func:`eval_hooks.report.compare_table` show);
    - ``report_section`` (its part of ``report.md`` and its PNGs; ``write_report`` adds the shell);
    - ``run`` (generation + scoring + the atomic write of ``out_dir``): the generic one here, which a
      family with its own pipelines overrides (MedCounterfact); ``default_max_new_tokens`` (its
      generation budget when none is given: a short-answer family generates only what it needs).

    Subclasses set ``name``, ``answer_types``, ``condition_accepted`` (and ``row_fields``), and implement
    ``is_condition``, ``expand_records``, ``metrics``, ``headline`` and ``report_section``. They are
    registered in :mod:`eval_hooks.families` (docs/architecture.md, "How to add an evaluation family")."""

    name: str = ""
    answer_types: tuple[str, ...] = ()
    #: row fields (beyond ROW_CORE) the metrics need; checked when a rows file is read back
    row_fields: tuple[str, ...] = ()

    def is_condition(self, c: Any) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    condition_accepted: str = ""

    # -- its own settings and what it can do (asked by the trainers and the config checks, never by name) ----
    #: the family's own settings: a dataclass whose fields (:func:`selectrust.core.settings.setting`: default and help
    #: text; a :class:`~selectrust.core.settings.Choice` type for a choice) the trainer's config composes into its
    #: ``eval`` group; None = it has none
    settings: type | None = None
    #: where its settings' keys sit in the ``eval`` group: False (any new family) the section ``eval.<name>``
    #: (``eval.med.judge``); True at the top of the group (Taste's ``eval.max_prompt_tokens``, a key that
    #: predates the sections and is kept as it is)
    flat_settings: bool = False
    #: its metrics split by per-item knowledge labels (row attribute ``knowledge``, :mod:`eval_hooks.knowledge`)
    #: and it has ``clean`` rows to estimate them from: ``eval.knowledge_path`` and the evaluate recipe's
    #: ``knowledge.enabled`` apply to it
    knowledge_labels: bool = False

    def setting_key(self, name: str) -> str:
        """The config key of its setting ``name`` (``eval.<name>`` or ``eval.<family>.<name>``), for messages."""
        return f"eval.{name}" if self.flat_settings else f"eval.{self.name}.{name}"

    def settings_from(self, eval_cfg: Any) -> Any:
        """Its settings (an instance of :attr:`settings`) read by attribute from the ``eval`` config group
        ``eval_cfg`` (a composed config or a schema instance); None when it has none."""
        if self.settings is None:
            return None
        source = eval_cfg if self.flat_settings else getattr(eval_cfg, self.name)
        return self.settings(**{f.name: getattr(source, f.name) for f in fields(self.settings)})

    def own_settings(self, settings: Any) -> Any:
        """``settings``, or the declared defaults (:attr:`settings` built with no arguments) when None: the one
        place a family's run or loader falls back on, so the defaults live only in its settings dataclass."""
        return self.settings() if settings is None and self.settings is not None else settings

    def check_settings(self, settings: Any) -> None:
        """Range checks of its settings, run with the config checks before any model loads, whichever family
        is evaluated (its keys are in every config); ValueError naming the key. None here."""

    def backend_needs(self, settings: Any) -> dict[str, tuple[str, str]]:
        """What its run needs from the generation backend beyond generating, with these settings:
        ``{capability: (what needs it, the setting that turns it off)}``, e.g. Med's ``{"label_scores":
        ("MedCounterfact's label probabilities ...", "eval.med.label_probs=false")}``; the config checks refuse
        a backend that lacks one, before anything runs. None here (the generic run only generates)."""
        return {}

    def configured(self, **options: Any) -> "Family":
        """A copy of this family with loading options (only Taste has any: ``max_prompt_tokens``,
        ``count_tokens``). Options that are all None return the family itself."""
        given = {k: v for k, v in options.items() if v is not None}
        if given:
            raise ValueError(f"family {self.name!r} takes no loading options, got {sorted(given)}")
        return self

    def expand_records(self, records: list[tuple[int, dict]], path) -> list[dict]:  # pragma: no cover
        raise NotImplementedError

    def load_records(self, records: list[tuple[int, dict]], path) -> list[dict]:
        """Rows from the records of one file: a file that already holds expanded rows (every record has
        ``row_id`` and ``prompt``, as written by ``python -m eval_hooks expand``) is validated as rows and
        returned as is; anything else is expanded as items. (MIST's items *are* rows: it always expands.)"""
        if all("row_id" in r and "prompt" in r for _, r in records):
            return self.validate_rows(records, path)
        return self.expand_records(records, path)

    def load(self, path) -> list[dict]:
        """Load, validate and expand an items file (JSONL, Parquet or a ``datasets`` source) into rows."""
        return self.load_records(read_records(path), path)

    def eval_rows(self, path, settings: Any = None) -> list[dict]:
        """The rows to evaluate from the items at ``path`` (the ``eval.path`` already resolved) under the
        family's own ``settings`` (:meth:`settings_from`; None = the defaults), before any model loads; the
        caller then keeps ``eval.max_rows`` whole items."""
        return self.load(path)

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

    def score_rows(self, rows: Sequence[dict], responses: Mapping[str, str]) -> list[dict]:
        """Parse and score each row's response: the lines of ``item_scores.jsonl`` (no files written)."""
        check_responses(rows, responses, None)
        return [self.score_row(r, responses[r["row_id"]]) for r in rows]

    # -- metrics, headline, report -------------------------------------------------------------------
    def metrics(self, item_scores: Sequence[dict], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        """The family's part of ``metrics.json`` from the lines of ``item_scores.jsonl`` (``n_boot``/``seed``:
        bootstrap settings, for a family that has CIs). ValueError naming the line and field on bad input."""
        raise NotImplementedError

    def headline(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The headline numbers of a ``metrics.json`` as a flat ``{"a.b": value}`` dict, in a fixed order."""
        raise NotImplementedError

    def report_section(self, metrics: dict, item_scores: Sequence[dict], out_dir: Path,
                       title: str) -> tuple[list[str], list[str]]:
        """``(markdown lines, names of the PNG files written into out_dir)``: the family's part of ``report.md``."""
        raise NotImplementedError

    def write_report(self, metrics: dict, item_scores: Sequence[dict], out_dir: str | Path, *,
                     title: str | None = None) -> Path:
        """Write ``out_dir/report.md`` (title, plots, then the family's section) and the section's PNGs;
        return the path of ``report.md``."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        title = title or f"{self.name} evaluation"
        body, plots = self.report_section(metrics, item_scores, out_dir, title)
        text = [f"# {title}", "", f"Family: `{self.name}`. Rates are percentages of rows or items.", "",
                *(f"![{p}]({p})" for p in plots), "", "## Results", "", *body, ""]
        path = out_dir / "report.md"
        path.write_text("\n".join(text), encoding="utf-8")
        return path

    # -- the run: generation, scoring, the atomic write ----------------------------------------------
    def publish(self, item_scores: Sequence[dict], metrics: dict, out_dir: str | Path, *,
                title: str | None = None) -> None:
        """Write ``item_scores.jsonl``, ``metrics.json`` and the report into ``out_dir`` atomically
        (:func:`eval_hooks.scoring.publish_outputs`): every family's run ends here."""
        publish_outputs(out_dir, item_scores, metrics,
                        lambda tmp: self.write_report(metrics, item_scores, tmp, title=title))

    def score_responses(self, rows: Sequence[dict], responses: Mapping[str, str], out_dir: str | Path, *,
                        step: int | None = None, n_boot: int = 1000, seed: int = 0, title: str | None = None,
                        extra: Mapping | None = None, baseline: Mapping | None = None,
                        finishes: Mapping[str, Mapping] | None = None) -> dict:
        """Score ``responses`` (``{row_id: text}``, one per row) against ``rows``, compute the metrics and
        :meth:`publish` them; return the metrics. ``step`` (and ``extra``, as ``eval_settings``) are
        recorded in ``metrics.json``. ``baseline``: a baseline evaluation's metrics, against which
        :meth:`quality_warnings` may warn (the warnings are also printed to stderr). ``finishes`` (the run's
        ``{row_id: {"finish_reason", "null_content"}}``): kept on each row of ``item_scores.jsonl``, counted in
        ``metrics["generation"]``, and null contents and ``length`` finishes reported in ``warnings`` (then always
        present, an empty list when there is nothing to say)."""
        item_scores = self.score_rows(rows, responses)
        metrics = {"family": self.name, **self.metrics(item_scores, n_boot=n_boot, seed=seed)}
        metrics.setdefault("n_rows", len(item_scores))
        metrics.setdefault("n_unparsed_rows", sum(not s["parse_ok"] for s in item_scores))
        warnings = self.quality_warnings(metrics, baseline)
        if finishes is not None:
            for s in item_scores:
                s.update(finishes[s["row_id"]])
            metrics["generation"], more = generation_warnings(finishes, (extra or {}).get("max_new_tokens"))
            warnings = [*(warnings or []), *more]  # a generated run always has the key
        if warnings is not None:
            metrics["warnings"] = warnings
            for w in warnings:
                print(f"warning: {w}", file=sys.stderr)
        if step is not None:
            metrics["step"] = step
        if extra:
            metrics.setdefault("eval_settings", dict(extra))
        self.publish(item_scores, metrics, out_dir, title=title)
        return metrics

    def quality_warnings(self, metrics: dict, baseline: Mapping | None) -> list[str] | None:
        """Warnings about the evaluation itself (too few scorable items, a format-compliance drop against
        ``baseline``), stored as ``metrics["warnings"]``; None (the default) = the family has none."""
        return None

    def default_max_new_tokens(self, rows: Sequence[dict]) -> int:
        """The generation budget per row for ``rows`` when the caller gives none (``eval.max_new_tokens=null``):
        :data:`DEFAULT_MAX_NEW_TOKENS` here; a family whose answers have a known length overrides it (MIST:
        from the rows' answer types)."""
        return DEFAULT_MAX_NEW_TOKENS

    def budget(self, rows: Sequence[dict], max_new_tokens: int | None) -> int:
        """``max_new_tokens`` when given (an explicit value always wins), else :meth:`default_max_new_tokens`."""
        return self.default_max_new_tokens(rows) if max_new_tokens is None else int(max_new_tokens)

    def run(self, backend, rows: Sequence[dict], out_dir: str | Path, *, step: int | None = None,
            max_new_tokens: int | None = None, temperature: float = 0.0, stop: Sequence[str] | None = None,
            progress: bool = True, n_boot: int = 1000, seed: int = 0, title: str | None = None,
            settings: Any = None) -> dict:
        """Generate one response per row with ``backend`` (under its ``prompt_settings``), then
        :meth:`score_responses`; returns the metrics written to ``out_dir/metrics.json``. ``settings`` is
        the family's own settings (:meth:`settings_from`); the generic run has none.
        ``max_new_tokens`` None = :meth:`default_max_new_tokens` of ``rows``."""
        responses, described, finishes = generate_responses(
            backend, rows, desc=f"eval {self.name}", max_new_tokens=self.budget(rows, max_new_tokens),
            temperature=temperature, stop=stop, progress=progress)
        return self.score_responses(rows, responses, out_dir, step=step, n_boot=n_boot, seed=seed, title=title,
                                    extra=described, finishes=finishes)


def answer_instruction(answer_type: str, choices: Any = None) -> str:
    """The closing instruction that makes a response parsable for this answer type (``AnswerType.instruction``)."""
    return _answer_instruction(answer_type)


def render_choices(choices: Any) -> str:
    if isinstance(choices, dict):
        pairs = [(str(k).strip().upper(), v) for k, v in choices.items()]
    else:
        pairs = [(chr(ord("A") + i), v) for i, v in enumerate(choices)]
    return "\n".join(f"{k}. {v}" for k, v in pairs)
