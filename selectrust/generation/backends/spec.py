"""What a generation backend declares: a :class:`BackendSpec` (its settings, factory, capabilities, flavours and
errors), the :class:`Capabilities` callers ask of it, the :class:`BuildContext` its factory gets, and the helpers of
its settings (:func:`setting`, :func:`check_positive`, :func:`check_settings`).

A backend is a :class:`BackendSpec`, declared in its own module next to the client it builds:

- ``settings``: a dataclass of its own config keys (``generation=<name>``, a ``mine-forks`` model spec), each with
  its default and help text (:func:`setting`); the single home of both. A field with ``choices`` becomes a
  choice-valued config key. An optional ``check(group)`` method raises ``ValueError`` for bad values.
- ``factory(settings, ctx) -> GenerationBackend``, ``ctx`` a :class:`BuildContext` (the live model, the
  tokenizer, the run's model path, the prompt settings).
- ``capabilities`` (:class:`Capabilities`): what callers may ask of it. A backend that serves several kinds of
  server declares them as *flavours*, each with its own capabilities, chosen by one of its settings
  (``flavour_key``); a value that names no flavour (``auto``) leaves the choice to the server's answer, and
  the backend's own ``capabilities`` (the most it can do) hold until then.
- ``errors``: the exceptions that mean the backend failed mid-run (a server that died or refused), on which a
  trainer checkpoints before it stops.

Which backends exist is the registry's (:data:`selectrust.generation.backends.BACKENDS`). How to add one:
docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..prompts import PromptSettings
    from .base import GenerationBackend

@dataclass(frozen=True)
class Capabilities:
    """What a backend (or one flavour of it) can do; callers ask these, never the backend's name."""

    #: Generates with the live model object it is handed (the trainer's policy: always the current weights).
    in_process: bool = False
    #: Generates with the run's model (``model.path`` and its adapters); False: a model of its own, named in its
    #: settings (a hosted chat model), which is what it evaluates.
    policy_model: bool = True
    #: Can be built from a model name alone, without the run's model or tokenizer (``mine-forks`` models).
    standalone: bool = False
    #: ``load_adapter(path, version)``: takes a LoRA adapter at run time.
    loads_adapters: bool = False
    #: ``prompt_logprobs(token_ids)``: the log-probs of a given sequence (the stale-weight probe).
    prompt_logprobs: bool = False
    #: ``score_labels`` of labels of several tokens (summed label-token log-probs; MedCounterfact's label
    #: probabilities). False: none, or first tokens only.
    label_scores: bool = False
    #: Samples carry their token ids and per-token log-probs (what GRPO rollouts train on).
    sampled_token_ids: bool = False
    #: The trainer pushes its adapter to it, and probes it, before rollouts and epoch-end evaluations.
    weight_sync: bool = False


@dataclass
class BuildContext:
    """What a backend's factory gets besides its settings."""

    #: The live model to generate with (an in-process backend); None: a standalone build loads ``model_path``.
    model: Any = None
    #: The run's tokenizer (client-side prompt rendering); None where there is none.
    tokenizer: Any = None
    #: The run's model (``model.path``): what an in-process backend loads standalone, a server's default served name.
    model_path: str | None = None
    #: The ``prompt`` group: how requests are rendered, as in training.
    prompt_settings: PromptSettings | None = None
    #: Prefix of the served names of the adapters a server backend loads (the epoch-end evaluation uses ``eval``).
    adapter_prefix: str = "policy"


@dataclass(frozen=True)
class BackendSpec:
    """One generation backend: name, settings dataclass, factory, capabilities (module docstring)."""

    name: str
    settings: type
    factory: Callable[[Any, BuildContext], GenerationBackend]
    capabilities: Capabilities
    summary: str = ""
    flavours: Mapping[str, Capabilities] = field(default_factory=dict)
    flavour_key: str | None = None
    errors: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.settings, type) or not callable(self.factory):
            raise TypeError(f"BackendSpec needs a name, a settings dataclass and a factory, got {self!r}")
        names = {f.name for f in fields(self.settings)}
        if self.flavours and self.flavour_key not in names:
            raise TypeError(f"backend {self.name!r}: flavour_key {self.flavour_key!r} is not one of its settings")

    def capabilities_for(self, settings) -> Capabilities:
        """The capabilities of the flavour ``settings`` name (``settings.<flavour_key>``), else the backend's own."""
        if not self.flavours:
            return self.capabilities
        return self.flavours.get(str(getattr(settings, self.flavour_key)), self.capabilities)

    def settings_from(self, values) -> Any:
        """The settings dataclass from ``values`` (a config node, a dataclass or a mapping): each of its fields
        that ``values`` has; the others keep their defaults."""
        def get(name):
            return values[name] if isinstance(values, Mapping) else getattr(values, name)

        def has(name) -> bool:
            return name in values if isinstance(values, Mapping) else hasattr(values, name)

        kw = {f.name: _plain(get(f.name)) for f in fields(self.settings) if has(f.name)}
        return self.settings(**kw)

    def build(self, values, ctx: BuildContext | None = None) -> GenerationBackend:
        """The backend of ``values`` (see :meth:`settings_from`)."""
        return self.factory(self.settings_from(values), ctx or BuildContext())


def setting(default: Any, help: str, *, choices: tuple[str, ...] = ()):
    """A settings field with its default and help text; ``choices``: the values a config accepts for it."""
    meta = {"help": help, **({"choices": tuple(choices)} if choices else {})}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


def check_positive(settings, keys: tuple[str, ...], group: str) -> None:
    """``ValueError`` naming ``<group>.<key>`` unless each of ``keys`` is > 0 (a settings ``check`` helper)."""
    for k in keys:
        v = getattr(settings, k)
        if v <= 0:
            raise ValueError(f"{group}.{k} must be > 0, got {v}")


def check_settings(spec: BackendSpec, settings, group: str) -> None:
    """Run the settings' own ``check(group)`` when it has one (``ValueError`` naming ``<group>.<key>``)."""
    check = getattr(spec.settings, "check", None)
    if check is not None:
        check(settings, group)


def _plain(value):
    """A config node's value as plain Python (a list or dict node becomes a list or dict)."""
    from omegaconf import OmegaConf  # deferred: imports omegaconf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
