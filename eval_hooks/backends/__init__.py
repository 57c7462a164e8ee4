"""Generation backends behind one interface (see ``base.GenerationBackend``)."""

from .base import GenerationBackend, GenerationRequest, GenerationResult, Sample, truncate_at_stop

__all__ = ["GenerationBackend", "GenerationRequest", "GenerationResult", "Sample", "truncate_at_stop",
           "HFBackend"]


def __getattr__(name):  # keep `import eval_hooks.backends` free of torch/transformers
    if name == "HFBackend":
        from .hf import HFBackend

        return HFBackend
    raise AttributeError(name)
