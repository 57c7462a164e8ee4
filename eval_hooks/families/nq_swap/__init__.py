"""NQ-Swap: MIST quartets from NQ-Swap's original and substituted passages (docs/nq_swap.md). Family: :mod:`.family`;
NQ-Swap's metrics: :mod:`.metrics`; report section: :mod:`.report`; rows: :mod:`.items` (written to a file by :mod:`eval_hooks.builders.nq_swap`)."""

from __future__ import annotations

from .family import NqSwapFamily, NqSwapSettings
