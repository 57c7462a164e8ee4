"""The one atomic write-and-publish of an evaluation's files (``item_scores.jsonl``, ``metrics.json``,
``report.md`` and its PNGs, the run's saved responses)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from selectrust.core.io import make_tmp_dir_beside, publish_dir, write_json_atomic, write_jsonl_atomic
from selectrust.generation.response_log import RESPONSES_FILE


def publish_outputs(out_dir: str | Path, item_scores: Sequence[dict], metrics: dict,
                    write_report: Callable[[Path], Any]) -> None:
    """Write ``item_scores.jsonl``, ``metrics.json`` and the report (``write_report(tmp_dir)``) into a
    temporary directory beside ``out_dir`` and move them into place only when all of them exist, so a
    failure leaves no half-written output (and any previous output intact). The run's saved responses
    (``responses.jsonl``, :mod:`selectrust.generation.response_log`) are carried into the published set."""
    tmp = make_tmp_dir_beside(out_dir)
    try:
        saved = Path(out_dir) / RESPONSES_FILE
        if saved.is_file():
            shutil.copy2(saved, tmp / RESPONSES_FILE)
        write_jsonl_atomic(tmp / "item_scores.jsonl", item_scores)
        write_json_atomic(tmp / "metrics.json", metrics)
        write_report(tmp)
        publish_dir(tmp, Path(out_dir))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
