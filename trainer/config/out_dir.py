"""A recipe's out dir (``hydra.run.dir``: ``trainer.run_dir``, ``out_dir``, ``out``) checked before Hydra makes it
and opens its log file there, and a refused start's leftovers removed.

Hydra makes ``hydra.run.dir`` and opens ``<dir>/<job>.log`` before the task function runs, so a read-only directory
was Hydra's 63-line ``Unable to configure handler 'file'`` and a directory in use had its log opened by a second run.
:class:`OutDirCheck`, a Hydra callback (``hydra.callbacks.out_dir_check`` in ``conf/<recipe>.yaml``), runs on
``on_run_start``, after composition and before any of that: a directory that is a file, cannot be written, or is
held by another run (its ``.lock``, :class:`trainer.runtime.run_dir.RunLock`) is one ``ConfigError`` line, exit 2.
The lock is looked at only on the global main process (``RANK`` unset or 0): the other ranks of the same run
would find their own run's lock; they learn of a refusal from rank 0 (``trainer.runtime.run_dir.open_run_dir``).

:func:`forget_refused_start` (called by ``cli_main`` after an exit 2) removes what a refused start created: the
directories it made, when they hold nothing but empty files (Hydra's log) and the start's own records
(:data:`DISPOSABLE`). A directory that was there before is never removed.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from omegaconf import OmegaConf
from selectrust.core.errors import ConfigError
import fcntl
import json
from eval_hooks.cli_contract import _JobError, _active

# what a start writes before its first real output; nothing else is removed
DISPOSABLE = (".lock", "meta.json", "data_hashes.json", "data_stats.json")

_created: dict[str, Path | None] = {"top": None, "dir": None}  # the first directory this start made, and the out dir


def out_dir_key(config) -> str:
    """The key that sets ``hydra.run.dir`` (``trainer.run_dir``), or ``hydra.run.dir`` itself."""
    raw = str(OmegaConf.to_container(config.hydra.run, resolve=False).get("dir", ""))
    return raw[2:-1] if raw.startswith("${") and raw.endswith("}") and "$" not in raw[2:] else "hydra.run.dir"


def check_out_dir(path: Path, key: str, *, main: bool = True) -> None:
    """Refuse (``ConfigError``, one line) an out dir that is a file, sits under a file, cannot be written (or made),
    or (``main``) is held by another run."""
    path = Path(path).expanduser().absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    advice = f"{key}: an out dir must be a writable directory, or a path where one can be made: give another"
    if not existing.is_dir():
        what = "Not a directory" if existing == path else f"{existing} is a file, not a directory"
        raise ConfigError(f"cannot write {path}: {what} ({advice})")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        where = "" if existing == path else f" (cannot make it in {existing})"
        raise ConfigError(f"cannot write {path}: {e.strerror or e}{where} ({advice})") from None
    if main and existing == path and (path / ".lock").exists():
        _refuse_if_held(path, key)


def _refuse_if_held(path: Path, key: str) -> None:
    from trainer.runtime.run_dir import LOCK_NAME, held_message  # deferred: imports torch

    lock_path = path / LOCK_NAME
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except OSError:
        return  # unreadable: the run's own lock reports it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            try:
                holder = json.loads(lock_path.read_text() or "{}")
            except (OSError, ValueError):
                holder = {}
            raise ConfigError(held_message(path, holder if isinstance(holder, dict) else {}, lock_path, key)) from None
    finally:
        os.close(fd)  # drops the probe's lock, if it took it


def _is_main_rank() -> bool:
    return os.environ.get("RANK", "0") == "0"


def remember(path: Path) -> None:
    """Note the first directory on the way to ``path`` that does not exist yet (what this start will create)."""
    path = Path(path).expanduser().absolute()
    top = None
    p = path
    while not p.exists() and p != p.parent:
        top, p = p, p.parent
    _created["top"], _created["dir"] = top, path


def forget_refused_start() -> None:
    """Remove what a refused start made (module docstring); called once the process is about to exit 2."""
    top, path = _created["top"], _created["dir"]
    _created["top"] = _created["dir"] = None
    if top is None or path is None or not path.is_dir() or not _is_main_rank():
        return
    for entry in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        try:
            if entry.is_file() and not entry.is_symlink() and (entry.name in DISPOSABLE or entry.stat().st_size == 0):
                entry.unlink()
            elif entry.is_dir() and not any(entry.iterdir()):
                entry.rmdir()
        except OSError:
            pass
    try:
        if not any(top.iterdir()):
            shutil.rmtree(top, ignore_errors=True)
    except OSError:
        pass


try:
    from hydra.experimental.callback import Callback as _Callback
except ImportError:  # pragma: no cover - Hydra without callbacks
    _Callback = object


class OutDirCheck(_Callback):
    """The Hydra callback (module docstring). An error reaches the error contract past Hydra, which would only warn
    about a callback's ``Exception`` (so it is carried as the contract's job error); outside the contract (a task
    function called by a test) it does nothing."""

    def on_run_start(self, config, **kwargs) -> None:
        if not _active["depth"]:
            return
        path = Path(str(config.hydra.run.dir))
        try:
            check_out_dir(path, out_dir_key(config), main=_is_main_rank())
        except Exception as e:  # noqa: BLE001 - a ConfigError: the contract's one line
            raise _JobError(e) from e
        remember(path)
