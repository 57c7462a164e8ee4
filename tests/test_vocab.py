"""Each condition vocabulary is written out once (eval_hooks/vocab.py) and imported everywhere else."""

import ast
from pathlib import Path

from eval_hooks import vocab

ROOT = Path(__file__).resolve().parents[1]
VOCABS = {name: frozenset(v) for name, v in vars(vocab).items() if name.isupper() and len(v) > 1}


def _literal_sets(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            yield node.lineno, frozenset(e.value for e in node.elts)


def test_no_vocabulary_is_spelled_out_twice():
    found = []
    for layer in ("trainer", "eval_hooks", "recipes", "launch", "demos"):
        for path in sorted((ROOT / layer).rglob("*.py")):
            if path == ROOT / "eval_hooks" / "vocab.py":
                continue
            for line, values in _literal_sets(ast.parse(path.read_text(encoding="utf-8"))):
                found += [f"{path.relative_to(ROOT)}:{line} repeats vocab.{name}"
                          for name, v in VOCABS.items() if values == v]
    assert not found, "\n".join(found)


def test_the_checker_sees_a_repeated_vocabulary():
    tree = ast.parse('CONDITIONS = ("clean", "misleading", "correct", "irrelevant")')
    assert [v for _, v in _literal_sets(tree)] == [VOCABS["MIST_CONDITIONS"]]
