"""Stop requests (SIGTERM, SIGUSR1, SIGINT) and the code that may be cut short by one.

The training loop installs :class:`StopSignals`: a signal only sets a flag, and the loop checkpoints the
step it just finished. Code that may block for long inside a step (a user's reward function, GRPO's rollout
generation) runs in :func:`interruptible`: a stop request arriving there raises :class:`StopRequested`, so the step in progress
is abandoned (its data position rewound) and the last completed step is checkpointed at once.
"""

from __future__ import annotations

import contextlib
import signal


class StopRequested(Exception):
    """A stop signal arrived inside an :func:`interruptible` region."""


_state = {"requested": False, "signum": None, "depth": 0}


def requested() -> bool:
    return _state["requested"]


def signum() -> int | None:
    return _state["signum"]


@contextlib.contextmanager
def interruptible():
    """Within this block a stop signal raises :class:`StopRequested` (also when one is already pending)."""
    if _state["requested"]:
        raise StopRequested(f"stop signal {_state['signum']} pending")
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1


def _handle(signum, frame):
    _state["requested"], _state["signum"] = True, signum
    if signum == signal.SIGINT:  # a second Ctrl-C interrupts at once
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if _state["depth"] > 0:
        raise StopRequested(f"stop signal {signum} during an interruptible call")


class StopSignals:
    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self):
        self._old = {}

    @property
    def requested(self) -> bool:
        return _state["requested"]

    def install(self) -> "StopSignals":
        _state.update(requested=False, signum=None, depth=0)
        for sig in self.SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, _handle)
            except ValueError:  # not the main thread
                pass
        return self

    def restore(self) -> int | None:
        """Put back the handlers that were installed before and clear the pending stop; returns its signal.

        The stop is spent once the loop has acted on it: a flag left set would make every later
        :func:`interruptible` region in this process raise at once (the next run's rollouts, a test in the same
        worker)."""
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
        spent = _state["signum"]
        _state.update(requested=False, signum=None, depth=0)
        return spent
