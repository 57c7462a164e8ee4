"""trainer.runtime.interrupt: a stop signal sets a flag that :func:`interruptible` regions raise on, and the flag
is spent when the handlers are restored (CI once failed six GRPO tests that ran, in the same pytest-xdist
worker, after a test whose SIGTERM was left pending)."""

import os
import signal

import pytest

from trainer.runtime import interrupt


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_a_signal_sets_the_flag_and_restore_spends_it(sig):
    before = signal.getsignal(sig)
    stops = interrupt.StopSignals().install()
    try:
        os.kill(os.getpid(), sig)
        assert stops.requested and interrupt.signum() == sig
        with pytest.raises(interrupt.StopRequested, match=f"stop signal {int(sig)} pending"):
            with interrupt.interruptible():
                pass
    finally:
        spent = stops.restore()
    assert spent == sig and not interrupt.requested() and interrupt.signum() is None
    assert signal.getsignal(sig) is before
    with interrupt.interruptible():  # a later region in this process runs
        pass


def test_restore_without_a_signal_returns_none():
    stops = interrupt.StopSignals().install()
    assert stops.restore() is None and not interrupt.requested()


def test_a_signal_inside_an_interruptible_region_raises_there():
    stops = interrupt.StopSignals().install()
    try:
        with pytest.raises(interrupt.StopRequested, match="during an interruptible call"):
            with interrupt.interruptible():
                os.kill(os.getpid(), signal.SIGTERM)
    finally:
        assert stops.restore() == signal.SIGTERM
