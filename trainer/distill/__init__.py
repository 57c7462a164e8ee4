"""Privileged-teacher distillation on Taste forks, its one home (the entry point is ``recipes/distill.py``, its
pipelines ``recipes/pipelines/``; the loss functions are pure torch in ``trainer/algos/distill.py``): the views,
its data (``views``), teacher and student aligned by completion position (``aligned``), stage 1's gathered
log-probs (``gathered``), reasoning generation (``generation``), calibration error (``calibration``), the
logit-based evaluation (``evaluation``), advice rows (``advice``) and the training step (``steps``)."""
