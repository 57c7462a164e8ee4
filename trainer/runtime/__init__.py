"""The machinery every trainer shares: run setup and metrics logger (``run``), the run directory
(``run_dir``), checkpoints (``checkpoint``), the optimizer-step loop (``loop``), interrupts
(``interrupt``), collectives (``distributed``), a run's provenance (``provenance``) and the declaration of a stage
(``stage``; the stage runner that runs stages is ``recipes/stages/``, above the recipes it runs).

Imports neither :mod:`trainer.rl` nor :mod:`trainer.distill` (tests/repo/test_import_rules.py).
"""
