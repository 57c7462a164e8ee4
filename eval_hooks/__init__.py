"""selectrust evaluation: matched-condition benchmarks (MIST, NQ-Swap, Box2, Taste, MedCounterfact), answer
parsers, metrics, dataset builders and reports (the generation backends they run on are the foundation's,
``selectrust.generation``). Its rooms, bottom to top: parsers, metrics, scoring, families, builders, and the entry
points at the root (docs/architecture.md#eval_hooks-in-rooms).

``import eval_hooks`` stays light (no torch/transformers): backends, metrics and plotting load on use.
"""

from .evaluate import (PROMPT_DEFENSE, build_requests, compute_metrics, headline, load_rows, read_responses,
                       run_matched_eval, score_responses, score_rows)
from .families import FAMILIES
from selectrust.core.io import DataError

__all__ = ["FAMILIES", "DataError", "PROMPT_DEFENSE", "load_rows", "read_responses", "score_rows",
           "score_responses", "build_requests", "run_matched_eval", "compute_metrics", "headline"]
