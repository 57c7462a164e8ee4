"""How a stage runner ends the process when a stop arrives (:class:`StopSignals`, a part of
:class:`~recipes.stages.runner.StageRunner`): in one line, exit 0 after SIGTERM (or SIGUSR1 in a training loop),
130 after Ctrl-C, finished stages kept."""

from __future__ import annotations

import contextlib

from trainer.runtime.stage import Stage
import signal


class _StopSignal(Exception):
    """SIGTERM arrived while a stage ran outside a training loop."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


class StopSignals:
    """The stop handling of :class:`~recipes.stages.runner.StageRunner` (uses its ``log``, ``records`` and
    ``write_record``)."""

    @contextlib.contextmanager
    def _signals_end(self, stage: Stage):
        """While a stage runs (outside a training loop's own handling), SIGTERM and Ctrl-C end the process in one
        line: exit 0 for SIGTERM (the stop rule of every entry point), 130 for Ctrl-C; finished stages are kept.
        Ctrl-C is Python's own handler here also when the process inherited SIGINT ignored (a job started with
        ``&`` or ``nohup`` by a non-interactive shell): the training loop takes SIGINT whatever it inherited, so
        every other stage does too. The handlers found are put back when the stage ends."""
        def stop(signum, frame):
            raise _StopSignal(signum)

        previous = {}
        for sig, handler in ((signal.SIGTERM, stop), (signal.SIGINT, signal.default_int_handler)):
            try:
                previous[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
        try:
            yield
        except (KeyboardInterrupt, _StopSignal) as e:
            ctrl_c = isinstance(e, KeyboardInterrupt)
            self.log(f"stage {stage.name} stopped by {'Ctrl-C' if ctrl_c else 'SIGTERM'} before it finished (finished "
                     f"stages are kept); run the same command again to continue")
            raise SystemExit(130 if ctrl_c else 0) from None
        except SystemExit as e:
            if e.code == 130:  # Ctrl-C in a training loop, which saved its checkpoint and exits 130 itself
                self.log(f"stage {stage.name} stopped by Ctrl-C (its checkpoint is saved); run the same command again "
                         f"to continue")
            raise
        finally:
            for sig, handler in previous.items():
                if handler is not None:  # None: a handler not set from Python, which cannot be put back
                    signal.signal(sig, handler)

    def _stopped(self, stage: Stage) -> None:
        """A training stage stopped early after saving its checkpoint: record it, say so in one line, exit 0."""
        self.write_record()
        step = self.records[stage.name].get("step")
        self.log(f"stage {stage.name} stopped early (its checkpoint is saved); run the same command again to "
                 f"continue (from step {step})")
        raise SystemExit(0)

    def _stopped_after(self, stage: Stage, signum: int) -> None:
        """A stop signal arrived while a training stage finished (its last save, its final evaluation): the stage
        is complete; say so in one line and exit (0 for SIGTERM or SIGUSR1, 130 for Ctrl-C) before the next stage."""
        self.write_record()
        ctrl_c = signum == signal.SIGINT
        self.log(f"stage {stage.name} finished; stopped by {'Ctrl-C' if ctrl_c else signal.Signals(signum).name} "
                 f"before the next stage (finished stages are kept); run the same command again to continue")
        raise SystemExit(130 if ctrl_c else 0)
