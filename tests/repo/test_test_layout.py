"""The test folders mirror the packages (tests/README.md): every package under ``selectrust/``, ``trainer/`` and
``eval_hooks/`` has a test folder at the same path under ``tests/`` with at least one test file in it (or below
it), and every test folder there names a package that exists. A package whose tests sit in its parent's folder is listed in
:data:`TESTED_IN_PARENT` with where they are."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIRRORED = ("selectrust", "trainer", "eval_hooks")

#: Packages without a test folder of their own: where their tests are.
TESTED_IN_PARENT = {
    "eval_hooks/families/box2": "tests/eval_hooks/metrics/test_metrics.py and test_reference_numbers.py (its metrics "
                                "on hand-worked and published figures), tests/eval_hooks/test_evaluate.py (end to end)",
    "eval_hooks/families/mist": "tests/eval_hooks/metrics/test_metrics.py and test_reference_numbers.py (its metrics "
                                "on hand-worked and published figures), tests/eval_hooks/test_evaluate.py (end to end)",
    "eval_hooks/families/med/term_lists": "data (the term lists, no code): tests/eval_hooks/builders/"
                                          "test_builders_medcounterfact.py reads them through med/terms.py",
}


def _packages() -> list[str]:
    return sorted(p.parent.relative_to(ROOT).as_posix()
                  for root in MIRRORED for p in (ROOT / root).rglob("__init__.py"))


def _test_folders() -> list[str]:
    return sorted(d.relative_to(ROOT / "tests").as_posix() for root in MIRRORED for d in [ROOT / "tests" / root,
                  *(ROOT / "tests" / root).rglob("*")] if d.is_dir() and d.name != "__pycache__")


def test_every_package_has_a_mirroring_test_folder_with_tests():
    packages = _packages()
    assert {"trainer/dpo", "eval_hooks/scoring", "selectrust/generation/backends"} <= set(packages)
    missing = [p for p in packages if p not in TESTED_IN_PARENT and not (ROOT / "tests" / p).is_dir()]
    assert not missing, f"no test folder tests/<package>/ for: {missing}"
    empty = [p for p in packages if (ROOT / "tests" / p).is_dir() and not list((ROOT / "tests" / p).rglob("test_*.py"))]
    assert not empty, f"test folders without a test file: {empty}"
    stale = [p for p in TESTED_IN_PARENT if p not in packages or (ROOT / "tests" / p).is_dir()]
    assert not stale, f"remove from TESTED_IN_PARENT (no such package, or it has a test folder now): {stale}"


def test_every_test_folder_names_a_package():
    packages = set(_packages())
    assert "trainer/runtime" in _test_folders()
    orphans = [d for d in _test_folders() if d not in packages]
    assert not orphans, f"test folders that mirror no package (moved or renamed?): {orphans}"
