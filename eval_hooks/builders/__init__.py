"""Matched-set builders: turn plain source data into family item files.

- ``gsm8k``: MIST quartets from any QA JSONL with numeric answers (``python -m eval_hooks build-gsm8k``).
- ``medcounterfact``: MedCounterfact items from MedEvidence (``python -m eval_hooks build-medcounterfact``).
- ``facts``: a real-knowledge MIST set from GeoNames (``python -m eval_hooks build-facts``).
- ``nq_swap``: MIST quartets from NQ-Swap's original and substituted passages (``python -m eval_hooks build-nq-swap``).
"""
