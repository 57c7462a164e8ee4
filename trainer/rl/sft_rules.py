"""The rules of ``algo.sft_rows`` by name: which prompt rows of a rollout batch get GRPO's SFT term (CHORD; the rows
and targets themselves are ``trainer/rl/sft_rows.py``). :data:`SFT_ROW_RULES` is the one table: ``picked_items``
looks the rule up in it, and the config's choice (``trainer.config.choices.SftRows``) is its names. Standard library
only, so the config schemas list the names without importing torch."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from selectrust.conditions import CORRECT


def zero_variance_failed(group, rows_by_id: Mapping[str, dict]) -> bool:
    """Every reward of the group is <= 0: the groups GRPO has no gradient on."""
    return all(x <= 0 for x in group.rewards)


def correct_context(group, rows_by_id: Mapping[str, dict]) -> bool:
    """The group's prompt row's ``condition`` is ``"correct"``."""
    return rows_by_id[group.item_id].get("condition") == CORRECT


#: ``algo.sft_rows`` -> ``picks(group, rows by item id) -> bool`` (a group: ``trainer.rl.rollout.Group``).
SFT_ROW_RULES: dict[str, Callable[[Any, Mapping[str, dict]], bool]] = {
    "zero_variance_failed": zero_variance_failed,
    "correct_context": correct_context,
}
