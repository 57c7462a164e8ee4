import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
# Subprocesses (python recipes/x.py, bench scripts) import this checkout's code, not an installed copy's
# (the in-process imports see it through pyproject's [tool.pytest.ini_options] pythonpath).
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.exists():
        pytest.skip(f"shared data directory {SHARED} not present")
    return SHARED


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from eval_hooks.models import ensure_tiny_model

    return ensure_tiny_model("tiny")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from eval_hooks.models import load_tokenizer

    return load_tokenizer(str(tiny_model_dir))


@pytest.fixture()
def tiny_model(tiny_model_dir):
    from eval_hooks.models import load_model

    return load_model(str(tiny_model_dir))
