"""Generation backends behind one interface (see ``base.GenerationBackend``), registered by name with their
settings, factory and capabilities in ``registry`` (``get_backend``, ``capabilities``)."""

from .base import GenerationBackend, GenerationRequest, GenerationResult, Sample, truncate_at_stop
from .registry import (BACKENDS, BackendSpec, BuildContext, Capabilities, backend_names, capabilities, get_backend,
                       register_backend)

__all__ = ["GenerationBackend", "GenerationRequest", "GenerationResult", "Sample", "truncate_at_stop",
           "HFBackend", "BACKENDS", "BackendSpec", "BuildContext", "Capabilities", "backend_names", "capabilities",
           "get_backend", "register_backend"]


def __getattr__(name):  # keep `import selectrust.generation.backends` free of torch/transformers
    if name == "HFBackend":
        from .hf import HFBackend

        return HFBackend
    raise AttributeError(name)
