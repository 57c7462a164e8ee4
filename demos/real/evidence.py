"""Committed evidence (issue 54, item 6): the small files behind the README's and docs/real_model.md's tables, in one
folder each (``docs/evidence/<name>/``), and the one command that regenerates the README's evidence table from them.

- :func:`write_evidence` (``python -m demos.real.seeds RUN... --out DIR --evidence docs/evidence/<name>``): the
  pooled result (``pooled.json``) and every run's ``summary.json`` and ``demo.json`` (its settings) as
  ``seed<N>/summary.json`` and ``seed<N>/demo.json``, and (issue 60) every evaluation stage's per-item scores as
  ``seed<N>/stages/<stage>/item_scores.jsonl.gz`` (:func:`write_item_scores`), so the item intervals regenerate from
  committed files (:func:`unpack_runs`); no adapters.
- :func:`evidence_table` (``python -m demos.real.seeds --from-evidence docs/evidence/<name> ... --markdown``): the
  README's table from those files alone: each arm's change from the base pooled over the seeds, with the item
  bootstrap interval and beside it the seed-level interval (a Student-t interval over the trained runs' per-seed
  changes), SC2W as the paired ratio; the held-out relation's table when it ran, "not run" when it did not;
  NQ-Swap's (each arm's change in exact match on the original and the substituted passage, p_org and the
  memorization ratio, over the runs that evaluated it: :mod:`demos.real.pooled_nq_swap`), "not run" when no run
  did; each set's per-seed spread (:func:`seed_lines`); the targets; then each second held-out relation committed
  beside them (:func:`add_second_relation`: ``python -m demos.real.seeds ... --evidence DIR --second-relation
  FILE``), its table regenerated from its json. No model, no item scores: every number is read from ``pooled.json``
  and those files.
- :data:`MANIFEST` (issue 59): every evidence folder records the sha256 of each of its files (``files``, by path
  inside the folder) and, apart, of each run's ``summary.json`` (``summaries``, by ``seed<N>``), written by
  :func:`write_evidence` (or :func:`write_manifest` for a folder written before); ``--from-evidence`` refuses a folder
  without it, with a file missing, added or changed (:func:`check_manifest`: one line, exit 2).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from eval_hooks.scoring.report_kit import md_table, pct, times
from selectrust.conditions import BENIGN_CONDITIONS, CLEAN, CORRECT, IRRELEVANT
from selectrust.core.errors import DataError
from selectrust.core.hashing import file_sha256
from selectrust.core.io import write_json_atomic, write_text_atomic

from . import decision
from .arms import label as arm_label
from .arms import trained
from .pooled import provenance_line
from .pooled_nq_swap import DIFFS as NQ_DIFFS, KEY as NQ_KEY, NAMES as NQ_NAMES, pooled_arms, seeds_line
from .relation_table import table as relation_table
from .report import SETS, verdict
import gzip

POOLED = "pooled.json"
MANIFEST = "MANIFEST.json"
#: A second held-out relation's pooled result in an evidence folder (:func:`add_second_relation`), by relation.
SECOND_RELATION = "second_relation_{}.json"
#: The README table's columns: (header, the pooled entry's ``minus_base`` key; None: the paired SC2W ratio).
COLUMNS = (("correct-context", CORRECT), ("unknown-correct", "unknown_correct_accuracy"), (CLEAN, CLEAN),
           (IRRELEVANT, IRRELEVANT), ("paired SC2W / base", None))


def write_evidence(folder: Path, runs: list[dict], pooled: dict) -> list[Path]:
    """Write the evidence folder of one pooled table (module docstring); returns the files written. The folder
    holds nothing else afterwards (an earlier ``seed<N>`` of a run no longer pooled is removed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("seed*"):  # only what an earlier write_evidence made there
        if old.is_dir() and old.name[4:].lstrip("-").isdigit() and (old / "summary.json").is_file():
            shutil.rmtree(old)
    for old in folder.glob(SECOND_RELATION.format("*")):  # of the runs pooled before: --second-relation adds them
        old.unlink()
        old.with_suffix(".md").unlink(missing_ok=True)
    written = [folder / POOLED]
    write_json_atomic(folder / POOLED, pooled)
    for r in runs:
        for name in ("summary.json", "demo.json"):
            src = Path(r["_dir"]) / name
            dest = folder / f"seed{r['seed']}" / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            written.append(dest)
        written += write_item_scores(Path(r["_dir"]), folder / f"seed{r['seed']}")
    written.append(write_manifest(folder))
    return written


#: Each run's per-item scores in the evidence folder (issue 60, Deliver 6): ``seed<N>/stages/<stage>/`` + this, the
#: run dir's layout, gzipped (about 10x smaller; written with no name and mtime 0, so the same scores give the same
#: bytes and the same hash).
ITEM_SCORES = "item_scores.jsonl.gz"


def write_item_scores(run_dir: Path, dest: Path) -> list[Path]:
    """Copy every evaluation stage's ``item_scores.jsonl`` of ``run_dir`` (the held-out items, the held-out
    relation, NQ-Swap, for the base and every arm) to ``dest/stages/<stage>/item_scores.jsonl.gz``, byte-stable
    gzip; returns the files written."""
    out = []
    for src in sorted(Path(run_dir).glob("stages/*/item_scores.jsonl")):
        target = dest / "stages" / src.parent.name / ITEM_SCORES
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                   compresslevel=9) as gz:
            gz.write(src.read_bytes())
        tmp.replace(target)
        out.append(target)
    return out


def unpack_runs(folder: Path, into: Path) -> list[Path]:
    """The evidence folder's runs as run dirs under ``into`` (``seed<N>/summary.json``, ``demo.json`` and
    ``stages/<stage>/item_scores.jsonl``, unzipped), so that the pooling tool recomputes every item interval from the
    committed files alone; returns the run dirs (seed order). A DataError naming a seed folder without item scores
    (an evidence folder written before they were committed)."""
    dirs = []
    for seed_dir in sorted(Path(folder).glob("seed*"), key=lambda p: int(p.name[4:]) if p.name[4:].lstrip("-").isdigit()
                           else 0):
        if not (seed_dir / "summary.json").is_file():
            continue
        items = sorted(seed_dir.glob(f"stages/*/{ITEM_SCORES}"))
        if not items:
            raise DataError(f"no per-item scores (stages/<stage>/{ITEM_SCORES}): written before issue 60",
                            path=seed_dir)
        run = Path(into) / seed_dir.name
        (run / "stages").mkdir(parents=True, exist_ok=True)
        for name in ("summary.json", "demo.json"):
            shutil.copyfile(seed_dir / name, run / name)
        for gz in items:
            stage = run / "stages" / gz.parent.name
            stage.mkdir(parents=True, exist_ok=True)
            (stage / "item_scores.jsonl").write_bytes(gzip.decompress(gz.read_bytes()))
        dirs.append(run)
    return dirs



def _folder_files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != MANIFEST}


def manifest_of(folder: Path) -> dict:
    """The manifest of ``folder`` as it is now (:data:`MANIFEST`)."""
    files = {rel: file_sha256(p) for rel, p in _folder_files(Path(folder)).items()}
    summaries = {rel.split("/")[0]: h for rel, h in files.items() if rel.endswith("/summary.json")}
    if "summary.json" in files:  # a one-run folder (full_experiment_seed0)
        summaries["."] = files["summary.json"]
    return {"algorithm": "sha256", "summaries": summaries, "files": files}


def write_manifest(folder: Path) -> Path:
    """Record the sha256 of every file of ``folder`` (and of each run's summary.json) in its :data:`MANIFEST`."""
    path = Path(folder) / MANIFEST
    write_json_atomic(path, manifest_of(folder))
    return path


def check_manifest(folder: Path) -> None:
    """A DataError naming the folder (and the first file that differs) when ``folder``'s files are not those its
    :data:`MANIFEST` records: the manifest missing or unreadable, a file missing, added, or with another sha256."""
    folder = Path(folder)
    path = folder / MANIFEST
    try:
        recorded = json.loads(path.read_text())
        files = recorded["files"]
        if not isinstance(files, dict):
            raise TypeError("files is not an object")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"no readable {MANIFEST} recording its files' sha256 ({type(e).__name__}: {e}); an evidence "
                        f"folder is written by `python -m demos.real.seeds ... --evidence DIR`", path=path) from None
    now = _folder_files(folder)
    for rel in sorted(set(files) | set(now)):
        if rel not in now:
            why = "is missing"
        elif rel not in files:
            why = f"is not recorded in {MANIFEST} (added)"
        elif file_sha256(now[rel]) != files[rel]:
            why = f"differs from the sha256 recorded in {MANIFEST} (changed, truncated or damaged)"
        else:
            continue
        raise DataError(f"{why}: this evidence folder is not the one written; regenerate it with `python -m "
                        f"demos.real.seeds ... --evidence DIR`", path=folder / rel)


def load_evidence(folder: Path) -> dict:
    """``pooled.json`` of an evidence folder; a DataError naming the file when it is missing or unreadable, or when a
    file of the folder differs from its :data:`MANIFEST` (:func:`check_manifest`)."""
    path = Path(folder) / POOLED
    try:
        pooled = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"not an evidence folder ({type(e).__name__}: {e})", path=path) from None
    for key in ("sets", "seeds", "targets", "checked_arm"):
        if key not in pooled:
            raise DataError(f"no `{key}`: not a pooled.json of `python -m demos.real.seeds`", path=path, field=key)
    check_manifest(folder)
    return pooled


def _pp(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}".replace("-", "−")


def _cell(value: float | None, ci: list | None, seed_ci: list | None, fmt) -> str:
    """``value [item bootstrap]; seeds [t interval]`` (each part only when known)."""
    out = fmt(value)
    if ci:
        out += f" [{fmt(ci[0])}, {fmt(ci[1])}]"
    if seed_ci:
        out += f"; seeds [{fmt(seed_ci[0])}, {fmt(seed_ci[1])}]"
    return out


def _row(name: str, entry: dict, bold: bool) -> list[str]:
    cells = []
    for _, key in COLUMNS:
        seed = entry["per_seed"].get(key or "paired_ratio") or {}
        x = entry["paired"]["paired_ratio"] if key is None else entry["minus_base"][key]
        cells.append(_cell(x["value"], x.get("ci"), seed.get("seed_ci"), times if key is None else _pp))
    label = f"**{arm_label(name)}** (targets checked)" if bold else arm_label(name)
    return [label, *cells]


#: The per-seed table's rows: (name, the ``per_seed`` key, its format).
SEED_METRICS = (("correct-context", CORRECT, _pp), ("unknown-correct", "unknown_correct_accuracy", _pp),
                ("paired SC2W / base", "paired_ratio", times))


def seed_lines(by_arm: dict, seeds: list, title: str) -> list[str]:
    """The per-seed spread of one set: each trained arm's change from its own seed's base on each seed (the
    ``per_seed.<metric>.by_seed`` values ``pooled.json`` keeps), correct-context, unknown-correct and the paired SC2W
    ratio, one column a seed; "–" where a seed has no value."""
    rows = []
    for a, e in ((a, e) for a, e in by_arm.items() if trained(a)):
        for name, key, fmt in SEED_METRICS:
            by_seed = (e["per_seed"].get(key) or {}).get("by_seed") or {}
            rows.append([arm_label(a), name, *(fmt(by_seed.get(str(s))) for s in seeds)])
    return [f"{title}, per seed (change from that seed's base)", "",
            md_table(["arm", "metric", *(f"seed {s}" for s in seeds)], rows), ""]


def nq_swap_lines(pooled: dict) -> list[str]:
    """The evidence table's NQ-Swap part: each trained arm's change from the base (:data:`NQ_DIFFS`), pooled over the
    runs that evaluated NQ-Swap, with both intervals (the targets' checked arm in bold); "not run" when none did (or
    for a ``pooled.json`` written before NQ-Swap)."""
    arms, head = pooled_arms(pooled.get(NQ_KEY)), "**NQ-Swap (an outside benchmark)**"
    if not arms:
        return [f"{head}: not run.", ""]
    base = arms.get("base")
    lead = f"{head}, {seeds_line(pooled[NQ_KEY])}" + (
        f": {base.get('n_questions', base['n_items'])} questions ({base['n_items']} evaluations over the seeds), "
        f"{base['n_known']} known to the base. Base: " + ", ".join(
            f"{NQ_NAMES[k]} {pct(base[k]['value'])}" for k in NQ_DIFFS) if base else "") + "."
    rows = []
    for a, e in ((a, e) for a, e in arms.items() if trained(a)):
        cells = [_cell(e["minus_base"][k]["value"], e["minus_base"][k].get("ci"),
                       (e["per_seed"].get(k) or {}).get("seed_ci"), _pp) for k in NQ_DIFFS]
        rows.append([f"**{arm_label(a)}** (targets checked)" if a == pooled["checked_arm"] else arm_label(a), *cells])
    return [lead, "", md_table(["arm", *(NQ_NAMES[k] for k in NQ_DIFFS)], rows), ""]


def evidence_table(pooled: dict, source: str = "") -> str:
    """The README's evidence table (markdown) of one ``pooled.json`` (module docstring); ``source``: the folder it
    came from, named in its first line."""
    arm, seeds, n = pooled["checked_arm"], pooled["seeds"], len(pooled["seeds"])
    what = ", ".join(str(x) for x in (pooled.get("demo"), pooled.get("size") and f"{pooled['size']} facts") if x)
    real = pooled["sets"]["real"]
    base = real["base"]
    parts = [f"Pooled over seeds {', '.join(map(str, seeds))} ({pooled['split']} items{'; ' + what if what else ''})"
             + (f", from `{source}`" if source else "") + f": {base['n_items']} held-out items, {base['n_unknown']} "
             f"unknown to the base (knowledge labels: {pooled.get('knowledge_labels') or 'not recorded'}). Base: "
             + ", ".join(f"{c} {pct(base[c]['value'])}" for c in BENIGN_CONDITIONS)
             + f", unknown-correct {pct(base['unknown_correct_accuracy']['value'])}, SC2W "
             f"{pct(base['paired']['base_paired_sc2w']['value'])}. {provenance_line(pooled.get('provenance'))}", ""]
    if pooled.get("provenance_note"):
        parts += [pooled["provenance_note"], ""]
    parts += [f"Change from the base in points, pooled over the seeds, with its {pooled['level']:.0%} item-bootstrap "
              f"interval (stratified by seed, {pooled['n_boot']} replicates) and the {pooled['level']:.0%} seed-level "
              f"interval (Student-t over the {n} trained runs' per-seed changes: `seeds [...]`); SC2W as the paired "
              "ratio on the base's clean-correct items.", ""]
    for key, what_set in SETS.items():
        by_arm = pooled["sets"].get(key)
        if by_arm is None:
            parts += [f"**{what_set[0].upper() + what_set[1:]}**: not run.", ""]
            continue
        rows = [_row(a, e, a == arm) for a, e in by_arm.items() if trained(a)]
        title = f"**{what_set[0].upper() + what_set[1:]}**"
        parts += [title, "", md_table(["arm", *(h for h, _ in COLUMNS)], rows), ""]
        parts += seed_lines(by_arm, seeds, title)
    parts += nq_swap_lines(pooled)
    parts += decision.lines(pooled.get("decision"))  # issue 60: each target on its bound, the point beside it
    parts += [f"**Targets ({arm_label(arm)})**", ""] + [f"- {k}: {verdict(ok)}" for k, ok in pooled["targets"].items()]
    return "\n".join(parts) + "\n"


def _check_same_runs(result: dict, pooled: dict, path: Path) -> None:
    """A DataError naming ``path`` when a second relation's result is not of the pooled runs' seeds and split."""
    for key in ("seeds", "split"):
        if result.get(key) != pooled.get(key):
            raise DataError(f"its {key} {result.get(key)!r} are not the pooled runs' ({pooled.get(key)!r}): a second "
                            "relation is committed beside the runs it evaluated", path=path, field=key)


def read_second_relation(result_path: Path, pooled: dict) -> dict:
    """A second held-out relation's pooled result (``python -m demos.real.second_relation``'s
    ``second_relation.json``), checked to be of the pooled runs' seeds and split; a DataError (one line) naming the
    file otherwise."""
    result_path = Path(result_path)
    try:
        result = json.loads(result_path.read_text())
        if not isinstance(result.get("relation"), str):
            raise KeyError("relation")
    except (OSError, ValueError, KeyError, AttributeError) as e:
        raise DataError(f"not a second_relation.json of `python -m demos.real.second_relation` ({type(e).__name__}: "
                        f"{e})", path=result_path) from None
    _check_same_runs(result, pooled, result_path)
    return result


def add_second_relation(folder: Path, result: dict) -> list[Path]:
    """Commit a second held-out relation's result (:func:`read_second_relation`) into the evidence folder as
    :data:`SECOND_RELATION` with its table as ``.md`` beside it, and record the folder again
    (:func:`write_manifest`); returns the files written."""
    dest = Path(folder) / SECOND_RELATION.format(result["relation"])
    write_json_atomic(dest, result)
    md = dest.with_suffix(".md")
    write_text_atomic(md, relation_table(result))
    return [dest, md, write_manifest(folder)]


def second_relation_tables(folder: Path, pooled: dict) -> list[str]:
    """The table of each second held-out relation committed in ``folder`` (:data:`SECOND_RELATION`), regenerated
    from its json (:func:`demos.real.relation_table.table`); a DataError for one of other runs."""
    return [relation_table(read_second_relation(path, pooled))
            for path in sorted(Path(folder).glob(SECOND_RELATION.format("*")))]


def evidence_tables(folders: list[Path]) -> str:
    """:func:`evidence_table` of each folder, in order, each followed by its second held-out relations' tables
    (:func:`second_relation_tables`); every file read and checked before anything is printed."""
    parts = []
    for f in folders:
        pooled = load_evidence(f)
        parts.append("\n".join([evidence_table(pooled, str(f)), *second_relation_tables(f, pooled)]))
    return "\n".join(parts)
