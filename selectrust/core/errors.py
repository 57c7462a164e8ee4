"""The error contract: :class:`ConfigError` (a config that composes but makes no sense) and the error every
reader of input data raises, :class:`DataError`, whose message names the file (or dataset), the line (for Parquet
and datasets: the 1-based row), the field and what would have been accepted. The CLI turns either into one clean
message and a non-zero exit. (:mod:`selectrust.core.io` re-exports it.)"""

from __future__ import annotations

import os

from selectrust.core.dataset_ids import is_dataset_source


#: The exit status of a command line that refused its input (one ``error: ...`` line); the error contract's
#: (``eval_hooks/cli_contract.py``), here so that entry points below it (the reference server) use the same.
INPUT_EXIT = 2


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined with ``"; "`` (a listing of differing keys stays readable)."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def describe_error(e: BaseException) -> str:
    """``e``'s message on one line, with its cause in parentheses when the message does not already say it."""
    cause = e.__cause__ if e.__cause__ is not None and str(e.__cause__) not in str(e) else None
    return one_line(f"{e} ({cause})" if cause is not None else str(e))


class ConfigError(ValueError):
    """A config that composes but makes no sense (raised before any model loads). The config contract's error: the
    config checks (``trainer/config/validation.py``) raise it, and so does every layer that refuses a setting at
    run time (the run directory, the nodes, the stage runner, a reward's name), so it lives here, below them all."""


class DataError(ValueError):
    """Bad input data. ``path``/``line``/``field`` locate the problem (any may be ``None``)."""

    def __init__(self, problem: str, *, path: str | os.PathLike | None = None, line: int | None = None,
                 field: str | None = None, accepted: str | None = None):
        self.problem = problem
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.accepted = accepted
        where = []
        if self.path is not None:
            where.append(self.path)
        if line is not None:
            where.append(f"{'row' if _is_dataset_label(self.path) else 'line'} {line}")
        if field is not None:
            where.append(f"field '{field}'")
        msg = (", ".join(where) + ": " if where else "") + problem
        if accepted:
            msg += f" (accepted: {accepted})"
        super().__init__(msg)


def _is_dataset_label(path: str | None) -> bool:
    if path is None:
        return False
    return is_dataset_source(path)


class PluginError(DataError):
    """An installed package's entry point (a plugin) that cannot be used: its module is missing or raises on import,
    or it names the wrong kind of object. Raised (by :class:`selectrust.core.plugins.Registry`, the one place that
    decides) only where that name is used; ``str(e)`` is one line naming the plugin, its entry-point group and
    distribution and the fix. A :class:`DataError`, so every command line reports it in one line, exit 2."""

    def __init__(self, message: str, *, kind: str, name: str, group: str, value: str, distribution: str | None,
                 details: str = ""):
        super().__init__(message)
        self.kind, self.name, self.group, self.value, self.distribution = kind, name, group, value, distribution
        self.details = details or message  # what is wrong and the fix, without the message's list of other choices
