"""The DPO-style losses, by name (``algo.loss_type``): the one place that lists them (the DPO trainer's, beside its
micro-batch ``trainer/dpo/pairs.py``; the losses themselves are pure torch functions in ``trainer/algos/dpo.py``).

A loss is a :class:`trainer.algos.dpo.DPOLoss` (the pure function and what it needs from the step). Losses come
from three places (:data:`DPO_LOSSES`, an :class:`selectrust.core.plugins.Registry`), looked up in this order:

- :data:`BUILTIN`: one line per loss of this repository, ``name -> "module:attribute"`` of its ``DPOLoss`` (a
  string, not an import: the names are listed and checked without importing torch);
- ``DPO_LOSSES.register(name, loss)``, in code;
- the entry-point group :data:`ENTRY_POINT_GROUP` of installed packages::

      [project.entry-points."selectrust.dpo_losses"]
      ipo = "mypackage.losses:IPO"

This module is torch-free: the config schema offers and checks ``algo.loss_type`` from the names alone
(``trainer.config.choices.DPOLossType``); a loss's module (torch) is imported when :func:`dpo_loss` first asks
for it, in the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from selectrust.core.plugins import Registry

if TYPE_CHECKING:
    from trainer.algos.dpo import DPOLoss

ENTRY_POINT_GROUP = "selectrust.dpo_losses"

BUILTIN: dict[str, str] = {
    "sigmoid": "trainer.algos.dpo:SIGMOID",  # Rafailov et al. 2023: a reference, summed log-probs
    "simpo": "trainer.algos.dpo:SIMPO",  # Meng et al. 2024: reference-free, per-token means, its own gamma
}

#: What ``--help`` says of a built-in loss after its name (``algo.loss_type``'s help text lists every registered loss,
#: generated from :data:`DPO_LOSSES`: a plugin's name is listed alone). Torch-free, like the names.
SUMMARIES: dict[str, str] = {
    "sigmoid": "Rafailov et al. 2023, with label_smoothing as cDPO",
    "simpo": "Meng et al. 2024: reference-free, on per-token mean log-probs, margin simpo_gamma; no reference is built",
}


def _accept(name: str, loss: object) -> DPOLoss:
    """What a built-in line or an entry point names must be a ``DPOLoss``; ValueError otherwise."""
    from trainer.algos.dpo import DPOLoss  # deferred: imports torch

    if not isinstance(loss, DPOLoss):
        raise ValueError(f"DPO loss {name!r}: {DPO_LOSSES.source(name)!r} is not a DPOLoss (got {loss!r})")
    return loss


def _unknown(name: str, known: list[str]) -> ValueError:
    return ValueError(f"unknown DPO loss {name!r}; registered: {sorted(known)}")


#: ``DPO_LOSSES[name]`` is :func:`dpo_loss`; iterating gives the names ``algo.loss_type`` accepts.
DPO_LOSSES: Registry[DPOLoss] = Registry("DPO loss", ENTRY_POINT_GROUP, BUILTIN, accept=_accept, error=ValueError,
                                         unknown=_unknown)

#: ``dpo_loss(name)``: the DPO-style loss registered as ``name``; a ``PluginError`` (one line, exit 2) for a broken
#: plugin; ValueError listing the registered ones otherwise.
dpo_loss = DPO_LOSSES.get
