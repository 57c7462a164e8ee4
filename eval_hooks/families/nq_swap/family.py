"""The nq_swap family: MIST quartets built from NQ-Swap (:mod:`.items`), scored like MIST
(its four accuracies, SC2W, slices, knowledge split, report and plots) with NQ-Swap's own metrics beside them
(:mod:`.metrics`: ``nq_swap.p_sub``, ``nq_swap.p_org``, ``nq_swap.memorization_ratio``, ``nq_swap.em_org_context``,
per knowledge label). docs/nq_swap.md.

``eval.path`` may be a rows file (``python -m eval_hooks build-nq-swap``) or the NQ-Swap data itself (the merged
JSONL, ``nqswap.zip``, a Hub id, the shipped sample ``eval_hooks/data/nq_swap_sample.jsonl``), which is built in
memory with ``eval.nq_swap`` (:class:`NqSwapSettings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from selectrust.core.settings import setting
from ..mist.family import MistFamily
from .metrics import headline as nq_headline
from .metrics import nq_swap_metrics
from .report import report_section


@dataclass
class NqSwapSettings:
    """NQ-Swap's settings: the section ``eval.nq_swap``, used when ``eval.path`` is NQ-Swap data (not rows)."""

    questions: Optional[int] = setting(None, "Questions (items) sampled from NQ-Swap data (null: every one kept).")
    seed: int = setting(0, "Seed of the question sample, the substitution drawn per question and the irrelevant "
                           "passages.")
    max_context_words: Optional[int] = setting(None, "Drop questions whose passages are longer than this many words "
                                                     "(the sample is then stratified by length); null: no cap.")


class NqSwapFamily(MistFamily):
    name = "nq_swap"
    settings = NqSwapSettings  # the section eval.nq_swap

    def check_settings(self, settings: NqSwapSettings) -> None:
        if settings.questions is not None and settings.questions < 2:
            raise ValueError(f"eval.nq_swap.questions must be >= 2 (an item's irrelevant passage is another's), got "
                             f"{settings.questions}")
        if settings.max_context_words is not None and settings.max_context_words < 1:
            raise ValueError(f"eval.nq_swap.max_context_words must be >= 1 or null, got {settings.max_context_words}")

    def eval_rows(self, path, settings: NqSwapSettings | None = None) -> list[dict]:
        """Rows from a rows file, or built in memory from NQ-Swap data (records with ``org_context``)."""
        from .items import build_rows, read_source

        records, label = read_source(path)
        if all("org_context" in r and "prompt" not in r for _, r in records):
            s = self.own_settings(settings)
            rows, _ = build_rows(records, label=label, items=s.questions, seed=s.seed,
                                 max_context_words=s.max_context_words)
            return self.expand_records(list(enumerate(rows, start=1)), f"{label} (built)")
        return self.load_records(records, path)

    def load(self, path) -> list[dict]:
        """A rows file, or NQ-Swap data built with the default settings (:meth:`eval_rows`)."""
        return self.eval_rows(path)

    def metrics(self, item_scores, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        out = super().metrics(item_scores, n_boot=n_boot, seed=seed)
        out["nq_swap"] = nq_swap_metrics(item_scores, n_boot=n_boot, seed=seed)
        return out

    def headline(self, metrics: dict[str, Any]) -> dict[str, Any]:
        return {**super().headline(metrics), **nq_headline(metrics)}

    def report_section(self, metrics, item_scores, out_dir, title):
        return report_section(metrics, item_scores, out_dir, title)
