"""What every family's run shares, below the families (docs/architecture.md#eval_hooks-in-rooms): the generation
requests for rows and the checks of their responses (:mod:`.responses`), the pieces every family's report section is
made of (:mod:`.report_kit`: number formatting, Markdown tables, plots) and the one atomic write-and-publish of an
evaluation's files (:mod:`.publish`). Family-agnostic: nothing here imports a family, a builder or an entry point.
"""

from __future__ import annotations

from .publish import publish_outputs
from .responses import build_requests, check_responses, generate_responses, generation_warnings

__all__ = ["build_requests", "check_responses", "generate_responses", "generation_warnings", "publish_outputs"]
