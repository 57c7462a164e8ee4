"""Every config choice kind is in docs/architecture.md's table of choice kinds (where its value is dispatched, and
how), each kind built from a table has that table's names, and help texts that list a registry's names are
generated from it (issue 58)."""

import importlib
import re

import pytest

from recipe_utils import ROOT
from selectrust.core.settings import Choice
from trainer.config import choices
from trainer.config.schemas import DPOAlgoConfig, OptimConfig, named
from trainer.dpo.losses import DPO_LOSSES, SUMMARIES
from trainer.runtime.lr_decay import DECAYS

DOC = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| `(\w+)` \| (.+?) \| (.+?) \| (.+?) \| (.+?) \|$")


def _kinds() -> dict[str, type[Choice]]:
    """Every ``Choice`` kind trainer/config/choices.py offers, by name."""
    return {n: v for n, v in vars(choices).items()
            if isinstance(v, type) and issubclass(v, Choice) and v is not Choice}


def _doc_rows() -> dict[str, tuple[str, str]]:
    """``{kind: (how, table)}`` of the doc's table "Choice kinds and their dispatch"."""
    text = DOC.read_text().split("### Choice kinds and their dispatch", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): (m.group(4), m.group(5).strip("` ")) for line in text.splitlines() if (m := ROW.match(line))}


def test_the_finders_see_the_kinds_and_the_table():
    assert {"Scheduler", "DPOLossType", "DistillStage", "Device"} <= set(_kinds())
    assert _doc_rows()["Scheduler"][1] == "trainer.runtime.lr_decay.DECAYS"


def test_every_choice_kind_is_in_the_docs_table():
    missing = sorted(set(_kinds()) - set(_doc_rows()))
    assert not missing, f"add a row for each to docs/architecture.md's 'Choice kinds and their dispatch': {missing}"
    stale = sorted(set(_doc_rows()) - set(_kinds()))
    assert not stale, f"rows for kinds trainer/config/choices.py no longer has: {stale}"


def test_each_row_says_how_and_a_table_row_names_its_table():
    for kind, (how, table) in _doc_rows().items():
        assert how.startswith(("Registry", "derived table", "plain: ")), (kind, how)
        assert (table == "—") == how.startswith("plain"), (kind, how, table)


@pytest.mark.parametrize("kind", sorted(k for k, (how, _) in _doc_rows().items() if not how.startswith("plain")))
def test_a_dispatched_kinds_names_are_its_tables(kind):
    module, _, attr = _doc_rows()[kind][1].rpartition(".")
    table = getattr(importlib.import_module(module), attr)
    assert [m.value for m in _kinds()[kind]] == list(table)


def test_the_help_texts_are_generated_from_the_tables():
    help_ = DPOAlgoConfig.__dataclass_fields__["loss_type"].metadata["help"]
    assert all(f"{name} (" in help_ or f" {name}." in help_ for name in DPO_LOSSES)
    assert all(summary in help_ for summary in SUMMARIES.values())
    assert set(SUMMARIES) <= set(DPO_LOSSES.builtin)  # a summary for a loss that is not there would be dropped
    scheduler = OptimConfig.__dataclass_fields__["scheduler"].metadata["help"]
    assert scheduler.startswith(" | ".join(DECAYS) + " (")


def test_named_lists_every_name_with_its_summary_where_it_has_one():
    assert named(["a", "b", "c"], {"a": "first", "c": ""}) == "a (first) | b | c"
