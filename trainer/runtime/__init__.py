"""The machinery every trainer shares: run setup and metrics logger (``run``), the run directory
(``run_dir``), checkpoints (``checkpoint``), the optimizer-step loop (``loop``), interrupts
(``interrupt``), collectives (``distributed``) and the stage runner (``stages``).

Imports neither :mod:`trainer.rl` nor :mod:`trainer.distill` (tests/repo/test_import_rules.py).
"""
