"""Privileged-teacher distillation on Taste forks: views, teacher sampling and evaluation (``views``),
the training step (``steps``), the two-stage pipeline (``pipeline``) and the OPSD baseline
(``opsd_pipeline``)."""
