"""A hang guard for in-process tests: fail instead of stalling the suite.

Not a timing assertion: the bound is generous (many times the normal run time) and only a hang reaches it;
what a test asserts is the mechanism (error type, attempt count, timed-out flag). Subprocess tests use
``subprocess.run(..., timeout=...)`` and socket tests a socket timeout instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading


class Hung(AssertionError):
    """The guarded block was still running at the guard's bound."""


@contextlib.contextmanager
def fails_after(seconds: float, what: str = "the guarded call"):
    """Raise :class:`Hung` in the main thread if the block runs past ``seconds``. A timer thread sends
    SIGUSR2 to this process (SIGALRM belongs to the reward timeout, SIGTERM/SIGINT/SIGUSR1 to the stop
    handlers); the handler raises at the next Python instruction of the main thread."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("fails_after works in the main thread only")
    done = False

    def on_signal(signum, frame):
        if not done:
            raise Hung(f"{what} was still running after {seconds:g} s: a hang")

    old = signal.signal(signal.SIGUSR2, on_signal)
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGUSR2))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        done = True
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGUSR2, old)
