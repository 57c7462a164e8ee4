"""``python recipes/<x>.py --help``: every key of that entry point, grouped by config group, with its help
text, its schema default and the value this command line would run with, all read from the typed schema
in :mod:`trainer.config` (the one source of truth) and the entry point's ``conf/<x>.yaml``.

Each recipe calls :func:`exit_with_help_if_asked` before its ``@hydra.main`` runs; other arguments on
the line (``recipe=...``, ``model.lora.r=8``) are applied, so ``--help`` shows their effect. Hydra's own
help stays available as ``--hydra-help``.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from enum import Enum
from pathlib import Path
from dataclasses import fields, is_dataclass
from typing import Any, Callable, Sequence

from selectrust.core.conf_dir import CONF_DIR as CONF
from trainer.config.choices import Choice
import os
from eval_hooks.cli_contract import DEBUG_ENV, INPUT_EXIT, end_process, run_with_contract, split_debug
from omegaconf.errors import OmegaConfBaseException
from selectrust.generation.backends import UnknownBackendError
from selectrust.core.errors import ConfigError
from selectrust.model import AdapterError
import dataclasses
import typing
from omegaconf import OmegaConf

HELP_FLAGS = ("--help", "-h")


def exit_with_help_if_asked(config_name: str, argv: Sequence[str] | None = None) -> None:
    """Print :func:`render_help` and exit 0 when ``argv`` (default ``sys.argv[1:]``) holds --help or -h."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in HELP_FLAGS for a in argv):
        script = f"recipes/{Path(sys.argv[0]).name}" if sys.argv and sys.argv[0].endswith(".py") else None
        print(render_help(config_name, [a for a in argv if a not in HELP_FLAGS], script=script))
        raise SystemExit(0)


def cli_main(config_name: str, main: Callable[[], None]) -> None:
    """A recipe's ``__main__``: the schema help for ``--help``/``-h`` (before Hydra parses the arguments), else
    ``main()`` under the error contract of every entry point (:mod:`eval_hooks.cli_contract`: a config error is one
    line, exit 2; SIGTERM one line, exit 0; Ctrl-C one line, exit 130; a traceback only with ``--debug`` or
    ``HYDRA_FULL_ERROR=1``). Hydra is told to re-raise (``HYDRA_FULL_ERROR=1`` in this process) so that the
    contract, not Hydra's own report, decides what is printed; ``--debug`` is taken off the line before Hydra reads it."""
    exit_with_help_if_asked(config_name)
    debug, sys.argv[1:] = split_debug(sys.argv[1:])
    os.environ[DEBUG_ENV] = "1"
    if not debug:  # Hydra logs this line before re-raising; the contract's own line replaces it
        logging.getLogger("hydra.core.utils").addFilter(_NotJobErrorLine())
    status = run_with_contract(_suggesting(main, config_name), input_errors=config_errors(), debug=debug)
    if status == INPUT_EXIT:  # a refused start leaves nothing behind (trainer/config/out_dir.py)
        from trainer.config.out_dir import forget_refused_start

        forget_refused_start()
    end_process(status)


def _suggesting(main: Callable[[], None], config_name: str | None = None) -> Callable[[], None]:
    """``main`` with Hydra's refusal of a misspelt key ("Could not override ...; use +key") replaced by one config
    error naming the closest known key, and its refusal of a choice that is a broken plugin (left out of the
    choices) by that plugin's error (:mod:`trainer.config.suggest`)."""
    def wrapped():
        from hydra.errors import HydraException  # deferred: imports hydra

        try:
            return main()
        except HydraException as e:
            from trainer.config.suggest import broken_choice, misspelt_override
            from selectrust.core.errors import ConfigError

            if (plugin := broken_choice(e)) is not None:
                raise plugin from None
            if (line := misspelt_override(e, config_name)) is None:
                raise
            raise ConfigError(line) from None

    return wrapped


class _NotJobErrorLine(logging.Filter):
    """Drops Hydra's "Error executing job with overrides: [...]" record (the error itself is reported once)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Error executing job")


def config_errors() -> tuple[type, ...]:
    """The errors that mean a bad config or input of a trainer entry point (one line, exit 2 under the contract):
    the semantic checks' ``ConfigError`` (also the stage runner's refusals), an adapter that does not fit, an
    unknown backend, and Hydra's and OmegaConf's own composition errors (an unknown
    key, a value of the wrong type, an override that does not parse)."""
    from hydra.errors import HydraException  # deferred: imports hydra


    return ConfigError, AdapterError, UnknownBackendError, HydraException, OmegaConfBaseException


def _show(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if value is None:
        return "null"
    if isinstance(value, str):
        return value if value and value.strip() == value else json.dumps(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return str(value)


def help_text(schema: type, prefix: str = "", cfg=None) -> list[tuple[str, str, Any, tuple[str, ...]]]:
    """(key, help, schema default, choices) for every leaf of a schema, in field order: the ``--help`` of
    every entry point. ``choices`` are a :class:`Choice` field's values (also of a
    list of them); a ``dict[str, <schema>]`` field is listed, then its entries' keys as ``<key>.<name>.*``.
    ``cfg`` (the composed config): a group whose node has a schema of its own that extends the field's (the
    chosen generation backend's) is listed with that schema's keys."""
    hints = typing.get_type_hints(schema)
    out = []
    for f in fields(schema):
        key, hint = f"{prefix}{f.name}", hints[f.name]
        args = typing.get_args(hint)
        if is_dataclass(hint):
            out.extend(help_text(_node_schema(cfg, key, hint), key + ".", cfg))
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        choice = next((t for t in (hint, *args) if isinstance(t, type) and issubclass(t, Choice)), None)
        out.append((key, f.metadata.get("help", ""), default, tuple(m.value for m in choice) if choice else ()))
        if typing.get_origin(hint) is dict and is_dataclass(args[-1]):
            out.extend(help_text(args[-1], key + ".<name>."))
    return out


def _node_schema(cfg, key: str, hint: type) -> type:
    """The schema of ``cfg``'s node at ``key`` when it is a subclass of ``hint`` (a generation backend's), else ``hint``."""
    if cfg is None:
        return hint

    node = OmegaConf.select(cfg, key, default=None)
    node_type = OmegaConf.get_type(node) if OmegaConf.is_config(node) else None
    return node_type if isinstance(node_type, type) and issubclass(node_type, hint) else hint


def _compose(config_name: str, overrides: list[str]):
    """(config, group choices, error): the composed config of this command line, or the error that stops it."""
    from hydra import compose, initialize_config_dir  # deferred: imports hydra
    from hydra.core.global_hydra import GlobalHydra  # deferred: imports hydra

    from trainer.config.composition import register_schemas  # deferred: import cycle with trainer.config.composition

    register_schemas()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
        choices = {k: v for k, v in OmegaConf.to_container(cfg.hydra.runtime.choices).items()
                   if not k.startswith("hydra")}
        return cfg, choices, None
    except Exception as e:  # noqa: BLE001 - shown in the help instead of the values
        cause = f" ({e.__cause__})" if e.__cause__ else ""
        return None, {}, f"{type(e).__name__}: {e}{cause}".replace("\n", " ")
    finally:
        GlobalHydra.instance().clear()


def render_help(config_name: str, overrides: Sequence[str] = (), *, script: str | None = None) -> str:
    """The help text of the entry point ``script`` (default ``recipes/<config_name>.py``) composed from
    ``conf/<config_name>.yaml`` (see the module docstring)."""
    from trainer.config.roots import SCHEMAS  # deferred: import cycle with trainer.config.roots

    defaults = OmegaConf.to_container(OmegaConf.load(CONF / f"{config_name}.yaml")).get("defaults", [])
    schema = SCHEMAS[next(d for d in defaults if isinstance(d, str) and d.endswith("_schema"))]
    cfg, choices, error = _compose(config_name, list(overrides))
    lines = [f"usage: python {script or f'recipes/{config_name}.py'} [GROUP=OPTION ...] [KEY=VALUE ...]  (Hydra overrides; "
             "--hydra-help for Hydra's own flags)", ""]
    groups = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name in choices)
    if groups:
        lines.append("Config groups (GROUP=OPTION picks a file conf/GROUP/OPTION.yaml; recipe= is applied last):")
        for g in groups:
            options = ", ".join(sorted(p.stem for p in (CONF / g).glob("*.yaml")))
            lines.append(f"  {g}={choices.get(g)}    options: {options}")
        lines.append("")
    if error:
        lines += [f"(this command line does not compose, so values are the schema defaults: {error})", ""]
    lines.append("Keys: KEY = value on this command line  [schema default if different; choices]  then the help.")
    sections: dict[str, list] = {"": []}
    for entry in help_text(schema, cfg=cfg):
        sections.setdefault(entry[0].split(".", 1)[0] if "." in entry[0] else "", []).append(entry)
    for group, entries in sections.items():
        picked = f"  ({group}={choices[group]})" if group in choices else ""
        lines += ["", f"[{group or 'top level'}]{picked}"]
        lines += _key_lines(entries, cfg)
    return "\n".join(lines)


def _key_lines(entries, cfg) -> list[str]:
    lines = []
    for key, text, default, allowed in entries:
        value = OmegaConf.select(cfg, key, default=default) if cfg is not None and "<name>" not in key else default
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            value = ", ".join(value)  # named entries (chain stages): their keys are listed as <key>.<name>.*
        notes = [] if _show(value) == _show(default) else [f"default {_show(default)}"]
        notes += [" | ".join(allowed)] if allowed else []
        lines.append(f"  {key} = {_show(value)}" + (f"  [{'; '.join(notes)}]" if notes else ""))
        lines += textwrap.wrap(text, width=100, initial_indent=" " * 6, subsequent_indent=" " * 6,
                               break_on_hyphens=False)
    return lines
