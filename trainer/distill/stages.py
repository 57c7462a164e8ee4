"""Distillation's stages by name (``algo.stage``): :data:`STAGE_STEPS`, the one table that
:meth:`trainer.distill.steps.DistillSteps.step` looks the stage up in and that the config's choice
(``trainer.config.choices.DistillStage``) is built from. Standard library only, so the config schemas list the
names without importing torch."""

from __future__ import annotations

#: ``algo.stage`` -> the :class:`~trainer.distill.steps.DistillSteps` method that trains one micro-batch of it:
#: ``kl`` (stage 1: teacher-to-student KL), ``calibration`` (stage 2: choice cross-entropy on the student's own
#: reasoning).
STAGE_STEPS: dict[str, str] = {"kl": "kl_step", "calibration": "calibration_step"}
