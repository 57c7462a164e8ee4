"""A recipe stage that is not a training run (an evaluation, pair mining): reused while its completion record
(``stage_complete.json``, ``recipes/stages/record.py``) matches, else run again and recorded (:class:`RecipeStages`,
a part of :class:`~recipes.stages.runner.StageRunner`)."""

from __future__ import annotations

from typing import Any, Callable

from recipes.stages.process import main_process
from recipes.stages.record import COMPLETE_RECORD
from trainer.runtime.relocation import portable_pair
from trainer.runtime.stage import Stage
from selectrust.core.io import write_json_atomic
from trainer.runtime.provenance import provenance_differences


class RecipeStages:
    """The reuse rule of :class:`~recipes.stages.runner.StageRunner`'s recipe stages (uses its ``stage_dir``,
    ``input_identity``, ``log``, ``records``, ``made_under`` and ``reuse``)."""

    def _reuse_or_run(self, stage: Stage, provenance: dict, run: Callable[[], Any], defaults=None) -> Any:
        """A recipe stage that is not a training run: reused when its completion record (``stage_complete.json``:
        its recipe and config, the content hash of each input, its result, the hashes of its outputs) matches now
        and its outputs match their hashes (the result then read from the stage's own result file:
        ``recipes/stages/record.py``); else run (an earlier run is moved aside to ``<name>.old-<n>`` first) and
        recorded. A record that cannot be read (cut short) is no completion: the stage runs again, said in one line."""
        from trainer.runtime.run_dir import config_differences, move_aside  # deferred: imports torch, numpy
        from recipes.stages.record import (  # deferred: import cycle with recipes.stages.record
            read_record, seal, verified_result)
        from recipes.stages.start import start_differences  # deferred: import cycle with recipes.stages.start

        out = self.stage_dir(stage.name)
        now = {**provenance, "inputs": self.input_identity(stage)}
        record, unreadable = read_record(out / COMPLETE_RECORD)
        why = unreadable and f"not complete: {unreadable}"
        if record is not None:
            diffs = [] if record.get("recipe") == stage.recipe else [f"recipe: {record.get('recipe')} != {stage.recipe}"]
            diffs += config_differences(*portable_pair(record.get("config", {}), now["config"], "out_dir"), "config.",
                                        defaults=defaults)
            diffs += start_differences(record.get("inputs", {}), now["inputs"])
            result, untrusted, note = (None, None, None) if diffs else verified_result(record, out)
            changed = [] if diffs or untrusted else self._provenance_changed(
                stage.name, record.get("provenance"), now.get("provenance"))
            if not diffs and not untrusted and not changed:
                if note:
                    self.log(f"{stage.name}: {note}")
                self.log(f"{stage.name}: already complete ({out / COMPLETE_RECORD}), reused")
                self.records[stage.name] = {"status": "skipped"}
                self.made_under[stage.name] = record.get("provenance")
                return result
            why = (f"finished with other settings or inputs ({'; '.join(diffs)})" if diffs
                   else f"not reused: {untrusted}" if untrusted
                   else f"its provenance differs from this run's ({'; '.join(changed)})")
        if why:
            self.log(f"{stage.name}: {why}: running it again (the earlier one is moved to {out.name}.old-<n>)")
            if main_process():
                move_aside(out)
        result = run()
        if main_process():
            write_json_atomic(out / COMPLETE_RECORD, {**now, "result": result})
            seal(out / COMPLETE_RECORD)
        self.records[stage.name] = {"status": "ran"}
        self.made_under[stage.name] = now.get("provenance")
        return result

    def _provenance_changed(self, name: str, recorded: dict | None, now: dict | None) -> list[str]:
        """How a finished stage's recorded provenance differs from ``now`` (``provenance.provenance_differences``);
        [] when it matches, when this runner checks none (``now`` None), or under ``reuse="config"`` (the
        difference then said in one line)."""
        if now is None:
            return []

        diffs = provenance_differences(recorded, now)
        if diffs and self.reuse == "config":
            self.log(f"{name}: reused on its config alone (reuse=config) although its provenance differs from this "
                     f"run's ({'; '.join(diffs)})")
            return []
        return diffs
