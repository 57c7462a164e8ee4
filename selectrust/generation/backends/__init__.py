"""The generation backends, by name: the one place that knows which backends exist and what each can do.

Every backend speaks one interface (:class:`~selectrust.generation.backends.base.GenerationBackend`) and declares a
:class:`~selectrust.generation.backends.spec.BackendSpec` in its own module (its settings, factory and capabilities:
``spec.py``). Nothing outside this package chooses code by a backend's name: the trainers' evaluation, the config
checks, GRPO, pair mining and Taste fork mining ask :func:`get_backend` and :func:`capabilities`, and an unknown
name is an error listing the known ones.

Backends come from three places (:data:`BACKENDS`, an :class:`selectrust.core.plugins.Registry`), looked up in this
order:

- :data:`BUILTIN`: one line per backend of this repository, its spec imported plainly here (every backend module is
  torch-free at import; torch is imported inside the functions that generate);
- :func:`register_backend`, in code;
- the entry-point group :data:`ENTRY_POINT_GROUP` of installed packages::

      [project.entry-points."selectrust.backends"]
      mybackend = "mypackage.mybackend:BACKEND"

A broken plugin (its module missing or raising on import, or naming anything but a :class:`BackendSpec` of its own
name) is left out of the schema, the choices and the messages (:func:`loadable_backend_names`, one warning line) and
fails, in one line naming the plugin, its group and distribution, only when chosen
(:class:`selectrust.core.errors.PluginError`, from the registry). How to add one: docs/architecture.md.
"""

from __future__ import annotations

from selectrust.core.plugins import Registry

from .base import GenerationBackend, GenerationRequest, GenerationResult, Sample, truncate_at_stop
from .hf import BACKEND as HF
from .hf import HFBackend
from .openai_chat import BACKEND as OPENAI_CHAT
from .spec import (BackendSpec, BuildContext, Capabilities, check_positive, check_settings,  # noqa: F401
                   setting)
from .vllm_server import BACKEND as VLLM_SERVER

ENTRY_POINT_GROUP = "selectrust.backends"

#: The built-in backends, one line each, in the order the config's choices list them.
BUILTIN: dict[str, BackendSpec] = {"hf": HF, "vllm_server": VLLM_SERVER, "openai_chat": OPENAI_CHAT}


class UnknownBackendError(ValueError):
    """No backend of that name (the message lists the known ones), or a spec registered in code that is none."""


def _accept(name: str, spec) -> BackendSpec:
    if not isinstance(spec, BackendSpec) or spec.name != name:
        raise UnknownBackendError(f"generation backend {name!r}: not a BackendSpec named {name!r} (got {spec!r})")
    return spec


#: ``BACKENDS[name]`` is :func:`get_backend`; iterating gives :func:`loadable_backend_names`.
BACKENDS: Registry[BackendSpec] = Registry("generation backend", ENTRY_POINT_GROUP, BUILTIN, accept=_accept,
                                           error=UnknownBackendError, component=BackendSpec)

#: ``register_backend(spec)``: make ``spec`` available under ``spec.name`` (the same spec again is a no-op; another
#: under a name in use is an error); ``unregister_backend(name)`` removes it; ``backend_names()``: the built-in
#: ones in :data:`BUILTIN` order, then those registered in code, then the entry points (sorted); ``get_backend(name)``:
#: the spec, :class:`UnknownBackendError` listing the known ones otherwise; ``loadable_backend_names()``: the names
#: less the broken plugins (what the config schema, its choices and the messages list).
register_backend, unregister_backend, backend_names, get_backend, loadable_backend_names = (
    BACKENDS.add, BACKENDS.unregister, BACKENDS.names, BACKENDS.get, BACKENDS.loadable)


def capabilities(name: str, settings=None) -> Capabilities:
    """What backend ``name`` can do with ``settings`` (its flavour, when it declares flavours)."""
    spec = get_backend(name)
    return spec.capabilities if settings is None else spec.capabilities_for(settings)


def backends_with(*capabilities: str) -> list[str]:
    """The backends whose own capabilities include any of ``capabilities`` (for messages naming what to use)."""
    return [n for n in loadable_backend_names() if any(getattr(get_backend(n).capabilities, c) for c in capabilities)]


def backends_that(*capabilities: str, generation=None) -> str:
    """``generation=<a> or generation=<b>``: the registered backends with any of ``capabilities`` (for messages).
    With ``generation`` (the chosen ``generation`` node) of a backend with flavours (vllm_server's ``server_kind``),
    the flavours that give one of ``capabilities`` come first, as the fix ``generation.server_kind=vllm``."""
    fixes = [f"generation={n}" for n in backends_with(*capabilities)]
    if generation is not None:
        spec = get_backend(generation.backend)
        current = str(getattr(generation, spec.flavour_key, None)) if spec.flavours else None
        fixes[:0] = [f"generation.{spec.flavour_key}={k}" for k, caps in spec.flavours.items()
                     if k != current and any(getattr(caps, c) for c in capabilities)]
    return " or ".join(fixes)


__all__ = ["BACKENDS", "BUILTIN", "ENTRY_POINT_GROUP", "BackendSpec", "BuildContext",
           "Capabilities", "GenerationBackend", "GenerationRequest", "GenerationResult", "HFBackend", "Sample",
           "UnknownBackendError", "backend_names", "backends_that", "backends_with", "capabilities", "check_positive",
           "check_settings", "get_backend", "loadable_backend_names", "register_backend", "setting",
           "truncate_at_stop", "unregister_backend"]
