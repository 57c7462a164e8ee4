""""Did you mean": the closest known key to a misspelt one, for the two refusals of an unknown key.

- Hydra's own, at composition (``algo.oversampel_cap=2``: "Could not override ...; To append to your config use
  +algo.oversampel_cap=2", advice that :func:`trainer.config.validation.check_known_keys` then refuses):
  :func:`misspelt_override` gives one line naming the key and the closest known one, without the ``+`` advice
  (``trainer.config.cli_help.cli_main`` raises it as a config error);
- ``check_known_keys`` (a ``+key`` the schema does not know): its message adds :func:`did_you_mean`.

And for a choice that is a broken plugin (``eval.family=<a plugin that does not load>``, left out of the choices with
a warning line): :func:`broken_choice`, that plugin's own one-line error instead of Hydra's "Invalid value".
"""

from __future__ import annotations

import difflib
import re
from dataclasses import fields, is_dataclass
from typing import Iterable
import typing
from selectrust.generation.backends import loadable_backend_names
from trainer.config.roots import SCHEMAS
from trainer.config.schemas import generation_schema
from selectrust.core.plugins import broken_plugin

__all__ = ["broken_choice", "did_you_mean", "misspelt_override"]

_OVERRIDE = re.compile(r"Could not override '(?P<key>[^']+)'")
_NOT_IN = re.compile(r"Key '(?P<name>[^']+)' not in '(?P<schema>\w+)'")
_FULL_KEY = re.compile(r"full_key: (?P<full>[\w.]+)")
# a choice refused: a typed field's value, or a config group's option (generation=<backend>)
_EXPECTED = re.compile(r"expected one of \[(?P<values>[^\]]*)\]")
_OPTIONS = re.compile(r"Available options in '[^']+':(?P<values>(?:\n\t[\w.-]+)+)")
_INVALID = re.compile(r"Invalid value '(?P<value>[^']+)'|Could not find '\w+/(?P<option>[^'/]+)'")


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the known name closest to ``name``, or ``""`` when none is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _schemas() -> dict[str, type]:
    """Every typed node by class name: the root schemas of :data:`trainer.config.roots.SCHEMAS`, the groups they
    hold, and each generation backend's schema."""
    found: dict[str, type] = {}
    todo = [*SCHEMAS.values(), *(generation_schema(n) for n in loadable_backend_names())]
    while todo:
        cls = todo.pop()
        if cls.__name__ in found:
            continue
        found[cls.__name__] = cls
        for hint in typing.get_type_hints(cls).values():
            todo.extend(t for t in (hint, *typing.get_args(hint)) if isinstance(t, type) and is_dataclass(t))
    return found


def broken_choice(error: BaseException):
    """For Hydra's refusal of a value that is no choice ("Invalid value 'x'", or a config group's "Could not find
    'group/x'") where ``x`` is a plugin some registry found broken and left out of the choices: that plugin's
    ``PluginError`` (one line naming the plugin and the fix); None otherwise."""
    text = f"{error} {error.__cause__ or ''}"
    m = _INVALID.search(text)
    if not m:
        return None
    # the choices the refusal lists pick the key's own registry (one name may be broken in several)
    listed = _EXPECTED.search(text) or _OPTIONS.search(text)
    offered = [v.strip() for v in re.split(r"[,\s]+", listed["values"]) if v.strip()] if listed else []
    return broken_plugin(m["value"] or m["option"], offered)


def keys_named(name: str, config_name: str | None) -> list[str]:
    """The keys of entry point ``config_name``'s root schema (``conf/<config_name>.yaml``) whose last part is
    ``name`` (``max_new_tokens`` -> ``algo.max_new_tokens``, ``eval.max_new_tokens``); [] without a root."""
    if not config_name:
        return []
    try:
        import typing
        from pathlib import Path

        from omegaconf import OmegaConf

        from trainer.config.roots import SCHEMAS

        conf = Path(__file__).resolve().parents[2] / "conf" / f"{config_name}.yaml"
        defaults = OmegaConf.to_container(OmegaConf.load(conf)).get("defaults", [])
        todo = [("", SCHEMAS[next(d for d in defaults if isinstance(d, str) and d.endswith("_schema"))])]
    except Exception:  # noqa: BLE001 - a pointer only: without it Hydra's own message stands
        return []
    found = []
    while todo:
        prefix, schema = todo.pop(0)
        hints = typing.get_type_hints(schema)
        for f in fields(schema):
            if is_dataclass(hints[f.name]):
                todo.append((f"{prefix}{f.name}.", hints[f.name]))
            elif f.name == name:
                found.append(f"{prefix}{f.name}")
    return found


def misspelt_override(error: BaseException, config_name: str | None = None) -> str | None:
    """For Hydra's "Could not override 'a.b'" about a key its schema does not know: one line naming the key and the
    closest known key (the caller raises it as a config error), or, when the entry point ``config_name`` has keys of
    that name in other groups (``generation.max_new_tokens``), those keys; None for any other error, or when no key
    is close."""
    text = f"{error} {error.__cause__ or ''}"  # Hydra's message; the schema's refusal is its cause
    over, not_in = _OVERRIDE.search(text), _NOT_IN.search(text)
    if over is None or not_in is None:
        return None
    schema = _schemas().get(not_in["schema"])
    if schema is None:
        return None
    key, name = over["key"], not_in["name"]
    close = difflib.get_close_matches(name, sorted(f.name for f in fields(schema)), n=1, cutoff=0.75)
    if not close:
        elsewhere = [k for k in keys_named(name, config_name) if k != key]
        if elsewhere:
            return (f"unknown config key '{key}' (not in {schema.__name__}; {name} is set by "
                    f"{' or '.join(elsewhere)})")
        return None
    full = m["full"] if (m := _FULL_KEY.search(text)) and key.startswith(m["full"]) else key  # the unknown part
    guess = f"{full[:len(full) - len(name)]}{close[0]}{key[len(full):]}" if full.endswith(name) else close[0]
    return f"unknown config key '{key}' (not in {schema.__name__}; did you mean '{guess}'?)"
