"""How typed settings are declared, at the lowest layer that declares any: a setting is a dataclass field with
its default and its help text (:func:`setting`), a choice-valued one is typed with a :class:`Choice`.

The evaluation families declare their own settings here, in ``eval_hooks`` (``Family.settings``); the trainer's
config schemas (``trainer/config/schemas.py``) are written with the same two pieces and compose the families'
settings into the ``eval`` group, so ``--help`` prints every key's help text whichever layer declared it.
Standard library only: importing it costs nothing.
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Any, Iterable


def setting(default: Any, help: str, **kw):
    """A settings field with its default and its help text (``--help`` and the docs read ``metadata["help"]``).
    A list or dict default is copied for every instance."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


class Choice(str, Enum):
    """A value from a fixed set. A field typed with one refuses any other value at composition (YAML files
    and the command line give the plain name); a member is a ``str`` equal to its name, so code compares,
    hashes, formats and serialises it as that plain string."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __repr__(self) -> str:  # messages such as "saved 'x' != now 'y'" read as for a str
        return repr(self.value)


def choice_type(name: str, values: Iterable[str], module: str) -> type[Choice]:
    """A :class:`Choice` over ``values`` (built from the tuple the code that acts on the value checks), named
    ``name`` in ``module`` (where it is assigned, so that it pickles)."""
    return Choice(name, [(v, v) for v in values], module=module, qualname=name)
