"""Errors raised outside the loop's own code that the loop knows by type: on one of these,
``train_evaluate_finish`` checkpoints the last completed step before the run stops.

They live here, not beside the code that raises them (``trainer/rl/rewards.py``), so that the shared
loop needs nothing from :mod:`trainer.rl`.
"""


class RewardError(RuntimeError):
    """Too many reward-function failures: the run stops (message names the function and an input)."""
