"""Issue 25 minor items: one chain per directory, with chain.log written only under its lock; a full disk while
checkpointing reads as one message, not a chain of tracebacks."""

from __future__ import annotations

import errno
import subprocess
import sys
import time
import traceback

import pytest

from recipe_utils import ROOT, compose
from trainer.runtime.run_dir import RunDirLocked

HOLD = """
import sys, time
from pathlib import Path
from trainer.runtime.run_dir import RunLock
RunLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_chain_into_a_held_directory_writes_no_chain_log(tmp_path):
    from tests.recipes.test_chain import FAST, _chain

    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirLocked, match=rf"{tmp_path} is in use by another run \(host .*, pid {holder.pid}"):
            _chain(tmp_path, "recipe=scope_sft_then_dpo_tiny", *FAST)
        assert not (tmp_path / "chain.log").exists() and not (tmp_path / "stages").exists()
    finally:
        holder.kill()
        holder.wait()


def test_the_chain_log_is_not_hydras_job_file():
    """conf/chain.yaml: Hydra writes no chain.log of its own (it would open it before the lock is taken)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from recipe_utils import CONF

    compose("chain", [])  # registers the schemas
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        hydra_cfg = hydra_compose(config_name="chain", return_hydra_config=True).hydra
    assert list(hydra_cfg.job_logging.root.handlers) == ["console"]
    assert hydra_cfg.job_logging.handlers.file.delay is True  # never opened


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"),
                                     RuntimeError("PytorchStreamWriter failed writing file data/3: file write failed")])
def test_a_full_disk_while_checkpointing_is_one_message(tmp_path, failure):
    from trainer.runtime.checkpoint import DiskFullError, _writing

    tmp = tmp_path / ".tmp-step_4"
    tmp.mkdir()
    with pytest.raises(DiskFullError) as e:
        with _writing(tmp):
            try:
                raise failure
            except type(failure) as inner:  # torch's zip writer fails again while closing the file
                raise RuntimeError("PytorchStreamWriter: unexpected pos 128") from inner
    text = "".join(traceback.format_exception(e.value))
    assert text.count("Traceback (most recent call last)") == 1, text
    assert f"no space left while writing {tmp}" in text and "earlier checkpoints" in text
    assert not tmp.exists()
