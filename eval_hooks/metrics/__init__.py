"""Metrics: the pieces the families' metrics share, pure functions of item-level scores (the lines of
``item_scores.jsonl``); they know nothing about models or families; numpy only.

Each family's metrics live with the family (``eval_hooks/families/<name>/metrics.py``, e.g.
:mod:`eval_hooks.families.mist.metrics` with ``sc2w``, ``slice_metrics``, ``repair_analysis``); the
helpers they share are in :mod:`eval_hooks.metrics.common`, calibration statistics in
:mod:`eval_hooks.metrics.calibration`. ``metrics.json`` of a family's run by its name is
:func:`eval_hooks.compute_metrics` (``eval_hooks/evaluate.py``, above the families; this package is below them,
docs/architecture.md#eval_hooks-in-rooms). All rates are fractions in [0, 1]; undefined rates are ``None``
(JSON null).
"""
