"""Privileged-teacher distillation on Taste forks: the views (``views``), teacher and student aligned by
completion position (``aligned``), stage 1's gathered log-probs (``gathered``), reasoning generation
(``generation``), calibration error (``calibration``), the logit-based evaluation (``evaluation``), advice rows
(``advice``), the training step (``steps``), the two-stage pipeline (``pipeline``) and the OPSD baseline
(``opsd_pipeline``)."""
