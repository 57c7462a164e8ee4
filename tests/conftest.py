import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Subprocesses (python recipes/x.py, bench scripts) import this checkout's code, not an installed copy's
# (the in-process imports see it through pyproject's [tool.pytest.ini_options] pythonpath).
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
# Real public data shipped with the package (GSM8K test split, MedEvidence; MIT, licences beside them)
# and the published figures the reference tests reproduce (docs/data.md#shipped-data).
SHIPPED_DATA = ROOT / "eval_hooks" / "data"
REFERENCE_DIR = ROOT / "tests" / "data" / "reference"
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def gsm8k_path() -> Path:
    """The GSM8K test split (1,319 records), shipped in the repository."""
    return SHIPPED_DATA / "gsm8k_test.jsonl"


@pytest.fixture(scope="session")
def medevidence_path() -> Path:
    """MedEvidence, abstract version (284 records), shipped in the repository."""
    return SHIPPED_DATA / "medevidence_abstract.jsonl"


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """Published figures (SCOPE leaderboard, one Taste-Bench model's summary)."""
    return REFERENCE_DIR


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from selectrust.model import ensure_tiny_model

    return ensure_tiny_model("tiny")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from selectrust.model import load_tokenizer

    return load_tokenizer(str(tiny_model_dir))


@pytest.fixture()
def tiny_model(tiny_model_dir):
    from selectrust.model import load_model

    return load_model(str(tiny_model_dir))
