"""The model layer's input errors: a ``model.path`` (or ``--model``) that names no usable model.

:class:`ModelSourceError` is a :class:`~selectrust.core.errors.DataError`, so the error contract of every entry point
(``eval_hooks/cli_contract.py``) prints it as one line, exit 2; its message names the setting, the path and what is
wrong. :class:`ModelNotFoundError` (nothing there: a missing directory or file, a package not installed or holding
no GGUF) is also a ``FileNotFoundError``: a chain's planning check lets a model directory an earlier stage will
write pass (``recipes/stages/``). :class:`~selectrust.model.cache.ModelCacheError` (a damaged cache entry, an
unwritable cache root) is a :class:`ModelSourceError` too.
"""

from __future__ import annotations

from selectrust.core.errors import DataError

__all__ = ["ModelNotFoundError", "ModelSourceError"]


class ModelSourceError(DataError):
    """A model source that cannot be loaded; ``str(e)`` is one line naming the setting, the path and the problem,
    ``e.source`` the path (or None)."""

    def __init__(self, message: str, *, source: str | None = None):
        super().__init__(message)
        self.source = source


class ModelNotFoundError(ModelSourceError, FileNotFoundError):
    """Nothing at the path a model source names (a directory, a ``.gguf`` file, a ``pkg:`` package or its GGUF)."""
