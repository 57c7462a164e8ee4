"""The vocabulary of conditions and pools is written out once (selectrust/conditions.py) and imported everywhere else."""

import ast
from dataclasses import fields
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from selectrust import conditions
from selectrust.conditions import (CORRECT, SCOPE_DEFAULT_MASS, SCOPE_LAMBDAS, SCOPE_MASS_DEFAULTS, SCOPE_POOLS,
                                   TASTE_CONDITIONS, pool_mass)

ROOT = Path(__file__).resolve().parents[2]
VOCAB = ROOT / "selectrust" / "conditions.py"
PRODUCT = ("selectrust", "trainer", "eval_hooks", "recipes", "launch", "bench", "demos")
VOCABS = {name: frozenset(v) for name, v in vars(conditions).items()
          if name.isupper() and isinstance(v, tuple) and len(v) > 1}
#: Condition and pool names that only the vocabulary and their family's own package may write as a string literal:
#: every one of them, ``correct`` included.
OWNED = {**{name: "mist" for name in SCOPE_POOLS}, **{name: "taste" for name in TASTE_CONDITIONS}}
#: Condition names that are also the name of a field: ``correct`` is the field every scored row carries
#: (``row["correct"]``). Such a literal is the condition where it reads as one (:func:`_reads_as_condition`).
ALSO_FIELDS = {CORRECT}


def _product_files():
    for layer in PRODUCT:
        yield from sorted((ROOT / layer).rglob("*.py"))


def _literal_sets(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            yield node.lineno, frozenset(e.value for e in node.elts)


def _parents(tree) -> dict:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _is_name(node, names) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names


def _reads_as_condition(node, parents) -> bool:
    """Whether a literal that is also a field name (:data:`ALSO_FIELDS`) is used as the condition: compared
    (``row["condition"] == "correct"``), a key of an ``accuracy`` mapping (``m["accuracy"]["correct"]``, the
    per-condition accuracies) or written beside another condition name in a tuple, list, set or dict's keys. As a
    row's key (``row["correct"]``, ``row.get("correct")``, ``{"correct": ok}``) or in a list of fields it is the
    field."""
    par = parents.get(node)
    others = set(OWNED) - {node.value}
    if isinstance(par, ast.Compare):
        return True
    if isinstance(par, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_name(e, others) for e in par.elts)
    if isinstance(par, ast.Dict):
        return node in par.keys and any(_is_name(k, others) for k in par.keys)
    if isinstance(par, ast.Subscript) and par.slice is node:
        holder = par.value
    elif (isinstance(par, ast.Call) and node in par.args and isinstance(par.func, ast.Attribute)
          and par.func.attr == "get"):
        holder = par.func.value
    else:
        return False
    return isinstance(holder, ast.Subscript) and _is_name(holder.slice, {"accuracy"})


def _owned_literals(tree):
    """(line, name) of every string literal that is exactly one of the :data:`OWNED` names, where it names a
    condition (a name in :data:`ALSO_FIELDS` only where it reads as one)."""
    parents = _parents(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if _is_name(node, OWNED) and (node.value not in ALSO_FIELDS or _reads_as_condition(node, parents))]


def test_no_vocabulary_is_spelled_out_twice():
    found = []
    for path in _product_files():
        if path == VOCAB:
            continue
        for line, values in _literal_sets(ast.parse(path.read_text(encoding="utf-8"))):
            found += [f"{path.relative_to(ROOT)}:{line} repeats conditions.{name}"
                      for name, v in VOCABS.items() if values == v]
    assert not found, "\n".join(found)


def test_the_checker_sees_a_repeated_vocabulary():
    tree = ast.parse('CONDITIONS = ("clean", "misleading", "correct", "irrelevant")')
    assert [v for _, v in _literal_sets(tree)] == [VOCABS["MIST_CONDITIONS"]]


def test_a_pool_or_condition_name_is_a_literal_only_in_the_vocabulary_and_its_family():
    """A new condition or pool is added in selectrust/conditions.py and used by its family; every other module
    (trainer, recipes, builders, demos, ...) names it through the vocabulary's constants."""
    found = []
    for path in _product_files():
        rel = path.relative_to(ROOT)
        if path == VOCAB:
            continue
        for line, name in _owned_literals(ast.parse(path.read_text(encoding="utf-8"))):
            if rel.parts[:3] != ("eval_hooks", "families", OWNED[name]):
                found.append(f"{rel}:{line} spells out {name!r}")
    assert not found, "import the name from selectrust.conditions:\n" + "\n".join(found)


def test_the_literal_checker_sees_keys_values_and_comparisons_but_not_longer_strings():
    tree = ast.parse('x = {"misleading": 1}\nif c == "unknown_correct": pass\nf(pool="seeded")\n'
                     'y = "unknown_correct_accuracy"\n"""A docstring about the misleading pool."""')
    assert _owned_literals(tree) == [(1, "misleading"), (2, "unknown_correct"), (3, "seeded")]


def test_the_literal_checker_tells_the_correct_condition_from_the_correct_field():
    """``correct`` is a condition and the field of every scored row: the rule covers the condition."""
    conditions = ('a = r.get("condition") == "correct"\nb = m["accuracy"]["correct"]\nc = ("clean", "correct")\n'
                  'd = {"misleading": 1, "correct": 2}\ne = "correct" in seen\nf = acc["accuracy"].get("correct")')
    found = _owned_literals(ast.parse(conditions))
    assert sorted(n for n, name in found if name == "correct") == [1, 2, 3, 4, 5, 6]
    fields = ('a = row["correct"]\nb = rec.get("correct")\nc = {"item_id": 1, "correct": ok}\n'
              'd = ("item_id", "condition", "correct")\ne = DataError("x", field="correct")\n'
              'f = rows[CLEAN]["correct"]')
    assert _owned_literals(ast.parse(fields)) == []


def test_the_vocabulary_imports_nothing():
    tree = ast.parse(VOCAB.read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_each_vocabulary_prefix_names_a_registered_family_that_imports_it():
    """``MIST_*`` belongs to the family ``mist`` (eval_hooks/families/mist/), ``BOX2_*`` to ``box2``, ...: each such
    family is registered and its package imports its names from the vocabulary."""
    from eval_hooks.families import family_names

    families = {f for f in family_names() if any(name.startswith(f.upper() + "_") for name in VOCABS)}
    assert families == {"mist", "box2", "taste", "med"}
    for family in families:
        imported = {alias.name for path in (ROOT / "eval_hooks" / "families" / family).rglob("*.py")
                    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(node, ast.ImportFrom) and node.module == "selectrust.conditions" for alias in node.names}
        assert any(name.startswith(family.upper() + "_") for name in imported), family


def test_the_pools_default_masses_are_the_schema_and_conf_defaults():
    """The DPO schema's defaults come from the vocabulary; conf/algo/scope.yaml (the default algo) states the same."""
    from trainer.config.schemas import DPOAlgoConfig

    schema = {f.name: getattr(DPOAlgoConfig(), f.name) for f in fields(DPOAlgoConfig) if f.name in SCOPE_MASS_DEFAULTS}
    assert schema == SCOPE_MASS_DEFAULTS
    conf = OmegaConf.load(ROOT / "conf" / "algo" / "scope.yaml")
    stated = {k: conf[k] for k in SCOPE_MASS_DEFAULTS if k in conf}
    assert stated == {k: SCOPE_MASS_DEFAULTS[k] for k in stated} and set(SCOPE_LAMBDAS) <= set(stated)
    assert abs(sum(SCOPE_MASS_DEFAULTS[k] for k in SCOPE_LAMBDAS) - 1) < 1e-12
    assert SCOPE_DEFAULT_MASS == pool_mass(**SCOPE_MASS_DEFAULTS) and list(SCOPE_DEFAULT_MASS) == \
        ["misleading", "clean", "correct", "irrelevant"] and abs(sum(SCOPE_DEFAULT_MASS.values()) - 1) < 1e-12
    assert set(SCOPE_DEFAULT_MASS) <= set(SCOPE_POOLS)


def test_a_builder_without_a_context_for_a_condition_is_named():
    conditions.check_contexts({c: None for c in conditions.MIST_CONDITIONS}, "builder.py")
    partial = {c: None for c in conditions.MIST_CONDITIONS[:-1]}
    with pytest.raises(ValueError, match=rf"builder.py gives no context .*{conditions.MIST_CONDITIONS[-1]}"):
        conditions.check_contexts(partial, "builder.py")
