"""The one error contract of every entry point (``recipes/*.py``, the chain, the demos, ``python -m eval_hooks``):

- a config or input error (the typed schema's, a :class:`~selectrust.core.errors.DataError`, an entry point's own
  refusals, an out dir that cannot be written or is a file) is ONE line on stderr naming the key or the file,
  exit :data:`INPUT_EXIT` (2), printed before any model loads wherever the check can run that early;
- a full disk is one line (the file and what was kept), exit :data:`FAILURE_EXIT` (1): not a bad input, the same
  command resumes once space is freed;
- a server that is down or refuses a request is one line, exit :data:`FAILURE_EXIT` (1);
- a distributed run that lost a rank (another node died, was killed or stopped answering within the process
  group's timeout, ``trainer.dist_timeout_s``) is one line, exit :data:`FAILURE_EXIT` (1): every node is restarted
  with the same command and resumes from the last complete checkpoint;
- a stop is one line: SIGTERM exits :data:`SIGTERM_EXIT` (0), Ctrl-C :data:`CTRL_C_EXIT` (130); what was saved
  is kept (a training loop checkpoints first, with handlers of its own);
- a traceback only with ``HYDRA_FULL_ERROR=1`` or ``--debug`` (then errors propagate as they would without this
  contract; a stop prints its traceback, then its line and exit code); an unexpected error (a bug) keeps its
  traceback, exit 1.

:func:`run_with_contract` applies it around an entry point's ``main``; :func:`classify` is the pure mapping. A Hydra
entry point also decorates its task function with :func:`under_contract` (below ``@hydra.main``): an error inside the
job then reaches :func:`run_with_contract` past Hydra's own report (which writes a line of its own first).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import traceback
from typing import Callable, Sequence

from selectrust.core.errors import INPUT_EXIT, describe_error, one_line

FAILURE_EXIT = 1
SIGTERM_EXIT = 0
CTRL_C_EXIT = 130
DEBUG_FLAG = "--debug"
DEBUG_ENV = "HYDRA_FULL_ERROR"

# an out dir (or a file in it) that cannot be made or written: the command must name another
_PATH_ERRNOS = (errno.EACCES, errno.EPERM, errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.EROFS)
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class Stopped(BaseException):
    """SIGTERM arrived outside a training loop (which handles its own stop); a BaseException, like Ctrl-C's
    KeyboardInterrupt, so no ``except Exception`` on the way swallows it."""


class _JobError(BaseException):
    """An error of a task function under :func:`under_contract`, carried past Hydra (which catches ``Exception``)."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


_active = {"depth": 0}  # > 0 while run_with_contract runs an entry point in this process


def under_contract(task: Callable) -> Callable:
    """Decorate a Hydra task function (below ``@hydra.main``): while :func:`run_with_contract` runs it, its error is
    handed to the contract unreported by Hydra; called otherwise (a test calling it directly), it is transparent."""
    import functools

    @functools.wraps(task)
    def wrapped(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - unwrapped by run_with_contract, which reports or re-raises it
            if not _active["depth"]:
                raise
            raise _JobError(e) from e

    return wrapped


def split_debug(argv: Sequence[str]) -> tuple[bool, list[str]]:
    """(debug, argv without ``--debug``): debug when ``--debug`` is on the line or ``HYDRA_FULL_ERROR=1`` is set."""
    argv = list(argv)
    flag = DEBUG_FLAG in argv
    return flag or os.environ.get(DEBUG_ENV) == "1", [a for a in argv if a != DEBUG_FLAG]



def classify(e: BaseException, input_errors: tuple[type, ...] = ()) -> tuple[int, str] | None:
    """``(exit status, the one stderr line)`` for an error the contract maps, None for one it does not (a bug: it
    keeps its traceback). ``input_errors``: the caller's config-error classes (the trainer's ``ConfigError``, ...),
    on top of :class:`DataError` and the server errors this package knows."""
    from selectrust.generation.backends.transport import ServerError
    from selectrust.core.errors import DataError

    if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
        where = f" writing {e.filename}" if e.filename and str(e.filename) not in str(e.strerror) else ""
        return FAILURE_EXIT, f"error: disk full{where}: {one_line(e.strerror or e)}"
    if isinstance(e, OSError) and e.errno in _PATH_ERRNOS and e.filename:
        return INPUT_EXIT, (f"error: cannot write {e.filename}: {e.strerror} (an out dir must be a writable "
                            f"directory, or a path where one can be made: give another)")
    if isinstance(e, (DataError, *input_errors)):
        return INPUT_EXIT, f"error: {describe_error(e)}"
    if isinstance(e, ServerError):
        return FAILURE_EXIT, f"error: {one_line(e)}"
    if lost_peer(e):
        return FAILURE_EXIT, (f"error: lost contact with another rank of this distributed run ({type(e).__name__}: "
                              f"{one_line(e)[:400]}): a node or process died, was killed or did not answer within "
                              f"the collective timeout (trainer.dist_timeout_s); what was saved is kept: restart "
                              f"every node with the same command to resume from the last complete checkpoint")
    return None


# what torch's process-group backends say when a peer is gone or silent (gloo, NCCL, the c10d store)
_PEER_SIGNS = ("connection closed by peer", "connection reset by peer", "broken pipe", "timed out waiting",
               "watchdog caught collective operation timeout", "nccl communicator was aborted", "connection refused")
_BACKEND_SIGNS = ("gloo", "nccl", "c10d", "processgroup", "tcpstore")


def lost_peer(e: BaseException) -> bool:
    """Whether ``e`` is a collective that failed because another rank is gone or silent: torch.distributed's
    ``DistError`` family, or a backend's ``RuntimeError`` saying so (gloo raises plain ``RuntimeError``s)."""
    dist = sys.modules.get("torch.distributed")  # a process that never imported torch ran no collective
    if dist is None or not isinstance(e, RuntimeError):
        return False
    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(e, dist_error):
        return True
    text = str(e).lower()
    return any(s in text for s in _BACKEND_SIGNS) and any(s in text for s in _PEER_SIGNS)


def end_process(status: int) -> None:
    """Exit with ``status``: ``SystemExit``, or ``os._exit`` when a thread that is not a daemon is still alive (an
    HTTP worker of a served evaluation stopped mid-request, which the interpreter would wait on until its timeout),
    after flushing stdout and stderr. Every ``finally`` of the main thread has run by then (the response log is
    closed), and a training loop's stop never comes here (it returns or raises ``SystemExit`` itself)."""
    import threading

    lingering = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if lingering:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    raise SystemExit(status)


def _stop_line(what: str) -> str:
    return (f"stopped by {what}: what was saved is kept (checkpoints, finished stages, written responses); "
            f"run the same command again to continue")


def _raise_stopped(signum, frame):
    raise Stopped(signum)


def run_with_contract(main: Callable[[], object], *, input_errors: tuple[type, ...] = (), debug: bool = False) -> int:
    """Run ``main`` under the contract (module docstring) and return the exit status (``main``'s own int result,
    else 0). SIGTERM raises :class:`Stopped` here while ``main`` runs (code that handles it itself, a training
    loop or the stage runner, installs its own handler and restores this one); a ``SystemExit`` passes through.
    Ctrl-C (SIGINT) raises ``KeyboardInterrupt`` also in a process that inherited it ignored (started with ``&`` by a
    script, where Python leaves it ignored), so ``kill -INT`` stops it as the contract says."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_stopped)
        previous_int = signal.getsignal(signal.SIGINT)
        if previous_int == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: signals are not ours to take
        previous = previous_int = None
    _active["depth"] += 1
    try:
        result = _call(main)
    finally:
        _active["depth"] -= 1
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if previous_int == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    if isinstance(result, BaseException):
        return _report(result, input_errors, debug)
    return result if isinstance(result, int) else 0


def _call(main: Callable[[], object]) -> object:
    """``main()``'s result, or the stop or error that ended it (unwrapped from :class:`_JobError`)."""
    try:
        return main()
    except _JobError as carried:
        return carried.error
    except (Stopped, KeyboardInterrupt, Exception) as e:  # noqa: BLE001 - reported by _report
        return e


def _report(e: BaseException, input_errors: tuple[type, ...], debug: bool) -> int:
    """Print the contract's line for ``e`` and return its exit status; re-raise an error it does not map (or any
    error under ``debug``) with its own traceback."""
    if isinstance(e, (Stopped, KeyboardInterrupt)):
        if debug:
            traceback.print_exception(e)
        sigterm = isinstance(e, Stopped)
        print(_stop_line("SIGTERM" if sigterm else "Ctrl-C"), file=sys.stderr, flush=True)
        return SIGTERM_EXIT if sigterm else CTRL_C_EXIT
    mapped = None if debug else classify(e, input_errors)
    if mapped is None:
        raise e
    print(mapped[1], file=sys.stderr, flush=True)
    return mapped[0]
