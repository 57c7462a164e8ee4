"""The layer rules of docs/architecture.md, checked on the code by parsing every import with ``ast``
(module-level and function-level imports alike), and the function-length limits of the style guide."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from registry_kinds import REGISTRIES  # every registry of named components (test_plugin_errors.py walks it too)

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("selectrust", "trainer", "eval_hooks", "recipes", "launch", "bench", "demos")
BY_PATH = ("spec_from_file_location", "module_from_spec", "SourceFileLoader", "exec_module", "run_path", "load_source")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module named by an import in ``path`` (relative imports resolved; ``from a import b`` gives
    both ``a`` and ``a.b``, since ``b`` may be a submodule)."""
    return _imports_of(ast.parse(path.read_text(), str(path)), _module_name(path), path.name == "__init__.py")


def _imports_of(tree: ast.AST, name: str, is_package: bool = False) -> set[str]:
    """:func:`_imports` of the code ``tree`` of the module ``name`` (a package's ``__init__`` if ``is_package``)."""
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _files(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def _top(module: str) -> str:
    return module.split(".")[0]


def _offenders(folders: tuple[str, ...], forbidden: set[str]) -> list[str]:
    return [f"{p.relative_to(ROOT)} imports {m}" for p in _files(*folders) for m in sorted(_imports(p))
            if _top(m) in forbidden]


def test_imports_are_resolved_the_way_python_resolves_them():
    # the checker itself: a relative import (``from .checkpoint import ...`` in trainer/runtime/loop.py), an absolute
    # from-import naming a class, a function-level import (trainer/runtime/loop.py imports tqdm inside train_loop)
    assert "trainer.runtime.checkpoint" in _imports(ROOT / "trainer" / "runtime" / "loop.py")
    assert "tqdm.auto" in _imports(ROOT / "trainer" / "runtime" / "loop.py")
    assert "selectrust.core.io.DataError" in _imports(ROOT / "trainer" / "data" / "train_data.py")


def test_algos_import_only_torch_and_the_standard_library():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in _files("trainer/algos") for m in sorted(_imports(p))
           if _top(m) not in sys.stdlib_module_names and _top(m) not in ("torch", "__future__")
           and not m.startswith("trainer.algos")]
    assert not bad, "\n".join(bad)


def test_the_foundation_imports_nothing_of_the_product_above_it():
    # selectrust/ (core, model, generation) is the floor both training and evaluation stand on
    assert "selectrust.core.hashing" in _imports(ROOT / "selectrust" / "model" / "cache.py")  # the checker sees it
    bad = _offenders(("selectrust",), {"trainer", "eval_hooks", "recipes", "launch", "demos", "bench"})
    assert not bad, "\n".join(bad)


def test_eval_hooks_imports_no_other_layer():
    assert not (bad := _offenders(("eval_hooks",), {"trainer", "recipes", "launch", "demos", "bench"})), "\n".join(bad)


def test_trainer_never_imports_launch_or_recipes():
    assert not (bad := _offenders(("trainer",), {"recipes", "launch"})), "\n".join(bad)


def test_launch_never_imports_recipes():
    assert not (bad := _offenders(("launch",), {"recipes"})), "\n".join(bad)


def test_the_toy_task_imports_only_eval_hooks():
    # demos/toy/task.py builds data files and serves the toy:<seed>/<file> data source: eval_hooks below it,
    # nothing of the trainer, the recipes, launch or the rest of the demos
    bad = [m for m in sorted(_imports(ROOT / "demos" / "toy" / "task.py"))
           if _top(m) in ("trainer", "recipes", "launch", "demos")]
    assert not bad, bad
    assert "selectrust.core.io" in _imports(ROOT / "demos" / "toy" / "task.py")  # the checker sees its imports


def test_only_the_demo_entry_point_imports_the_demos_package():
    bad = [o for o in _offenders(("trainer", "eval_hooks", "launch", "recipes"), {"demos"})
           if not o.startswith(str(Path("recipes") / "demo.py"))]
    assert not bad, "\n".join(bad)
    assert "demos.real.pipeline" in _imports(ROOT / "recipes" / "demo.py")  # the checker sees the one that may


def test_the_demos_never_import_the_recipes():
    # the demos name their stages' recipes; recipes/demo.py hands the recipes' run functions down
    assert "trainer.runtime.stage" in _imports(ROOT / "demos" / "real" / "pipeline.py")  # the checker sees demos/
    assert not (bad := _offenders(("demos",), {"recipes"})), "\n".join(bad)


# What only the demo's toy task knows: its package, its builder, its data source's paths, its generator.
TOY_TASK = re.compile(r"\bdemos[./]toy\b|\bbuilders[./]toy\b|\btoy:(<seed>|\d|\{)|make_toy_task")


def test_the_generic_layers_do_not_know_the_toy_task():
    assert TOY_TASK.search("self.toy = f'toy:{seed}'") and TOY_TASK.search("'toy:0/sft_mix.jsonl'")
    assert not TOY_TASK.search("data.source=toy: the taste fork toy")  # the distill toy is another task
    assert not (ROOT / "eval_hooks" / "builders" / "toy.py").exists()
    bad = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in _files("trainer", "eval_hooks", "launch")
           for n, line in enumerate(p.read_text().splitlines(), 1) if TOY_TASK.search(line)]
    assert not bad, "\n".join(bad)


def test_nothing_loads_a_module_by_file_path():
    bad = []
    for p in _files(*PRODUCT):
        for node in ast.walk(ast.parse(p.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in BY_PATH:
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno} uses {name}")
        bad += [f"{p.relative_to(ROOT)} imports {m}" for m in _imports(p) if m in ("runpy", "imp")]
    assert not bad, "\n".join(bad)


# ---- imports made by a string (docs/architecture.md#import-rules) ------------------------------------------------

#: A string naming a module of the product and an attribute in it, to be imported later: the form of a registry's
#: built-in line (``"eval_hooks.families.mist:MistFamily"``). Config keys (``"trainer.run_dir"``) and entry-point
#: groups (``"selectrust.families"``) have no colon.
STRING_IMPORT = re.compile(rf"^((?:{'|'.join(PRODUCT)})(?:\.\w+)*):\w+(?:\.\w+)*$")
DYNAMIC_IMPORTERS = ("import_module", "__import__")
#: The one module that may turn a string into an import: the registries' reader of built-in lines and entry points.
STRING_IMPORTER = ROOT / "selectrust" / "core" / "plugins.py"


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _string_imports_of(tree: ast.AST, name: str) -> list[tuple[ast.AST, str]]:
    """``(node, module)`` for every module of the product that the module ``name`` names by a string to import it:
    a ``"module:attribute"`` string (an f-string ``f"{__name__}:..."`` names the module itself), and the argument of
    ``importlib.import_module`` / ``__import__``: a string, the fixed start of an f-string (``f"recipes.{s}"``
    names ``recipes``), or ``"?"`` for a value only known when the code runs (a config value). A third-party module
    imported by a constant name (``__import__("torch")``) is not one."""
    def named(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = STRING_IMPORT.match(node.value)
            return m.group(1) if m else None
        if isinstance(node, ast.JoinedStr) and len(node.values) > 1 and isinstance(node.values[0], ast.FormattedValue) \
                and isinstance(node.values[0].value, ast.Name) and node.values[0].value.id == "__name__" \
                and isinstance(node.values[1], ast.Constant) and str(node.values[1].value).startswith(":"):
            return name
        return None

    def argument(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value if _top(node.value) in PRODUCT else None
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            start = str(node.values[0].value).rstrip(".")
            return start if _top(start) in PRODUCT else "?"
        return named(node) or "?"

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in DYNAMIC_IMPORTERS and node.args:
            if (module := argument(node.args[0])) is not None:
                out.append((node, module))
        elif (module := named(node)) is not None:
            out.append((node, module))
    return out


def _string_imports(path: Path) -> set[str]:
    """The modules ``path`` names by a string to import them (:func:`_string_imports_of`), "?" left out."""
    return {m for _, m in _string_imports_of(ast.parse(path.read_text()), _module_name(path)) if m != "?"}


def _registry_tables(tree: ast.AST) -> set[int]:
    """``id`` of every node inside a registry's table of built-in lines: a dict (or dict comprehension) given to a
    call of ``...Registry(...)`` / ``...registry(...)``, or assigned at module level to a name given to one."""
    calls = [n for n in ast.walk(tree)
             if isinstance(n, ast.Call) and (_call_name(n) or "").lower().endswith("registry")]
    given = [a for c in calls for a in [*c.args, *(k.value for k in c.keywords)]]
    names = {a.id for a in given if isinstance(a, ast.Name)}
    tables = [a for a in given if isinstance(a, (ast.Dict, ast.DictComp))]
    for node in getattr(tree, "body", []):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id in names and isinstance(node.value, (ast.Dict, ast.DictComp)):
            tables.append(node.value)
    return {id(n) for t in tables for n in ast.walk(t)}


def _hidden_string_imports(tree: ast.Module, name: str, is_package: bool = False) -> list[tuple[int, str]]:
    """``(line, module)`` of the imports by a string that a plain import could make. The one kind allowed: a
    registry's built-in line (:func:`_registry_tables`) that defers the import of another module, one that this
    module does not import at its top (the config schema lists the DPO losses without importing torch). A string
    handed to ``import_module`` / ``__import__``, a line naming this module itself or one it already imports, and a
    ``"module:attribute"`` string anywhere else, hide an import."""
    tables = _registry_tables(tree)
    top = _imports_of(ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
                                 type_ignores=[]), name, is_package)
    return sorted((node.lineno, module) for node, module in _string_imports_of(tree, name)
                  if isinstance(node, ast.Call) or id(node) not in tables or module == name or module in top)


def test_the_string_import_finder():
    code = ("import importlib\nfrom eval_hooks.parsers import choice\n"
            "BUILTIN = {'a': 'eval_hooks.families.mist:MistFamily', 'b': 'eval_hooks.probe:B',\n"
            "           'c': 'eval_hooks.parsers.choice:BOOLEAN'}\n"
            "REG = Registry('kind', 'group', BUILTIN)\n"
            "HIDDEN = 'eval_hooks.parsers.numeric:NUMERIC'\n"
            "importlib.import_module(f'recipes.{name}')\nimportlib.import_module(cfg.reward)\n"
            "ARMS = Registry('arm', 'g', {a: f'{__name__}:{c}' for a, c in x})\n"
            # not string imports: a third-party module by its name, a config key, an entry-point group, a docstring
            "__import__('torch')\nKEY = 'trainer.run_dir'\nGROUP = 'selectrust.families'\n'see eval_hooks.a:b'\n")
    tree = ast.parse(code)
    assert sorted((n.lineno, m) for n, m in _string_imports_of(tree, "eval_hooks.probe")) == [
        (3, "eval_hooks.families.mist"), (3, "eval_hooks.probe"), (4, "eval_hooks.parsers.choice"),
        (6, "eval_hooks.parsers.numeric"), (7, "recipes"), (8, "?"), (9, "eval_hooks.probe")]
    # allowed: the line that defers eval_hooks.families.mist; hidden: the module itself, a module imported at the
    # top, a string outside a registry's table, the import_module calls, the f-string naming this module
    assert _hidden_string_imports(tree, "eval_hooks.probe") == [
        (3, "eval_hooks.probe"), (4, "eval_hooks.parsers.choice"), (6, "eval_hooks.parsers.numeric"), (7, "recipes"),
        (8, "?"), (9, "eval_hooks.probe")]


def test_no_import_is_hidden_in_a_string():
    """No product module names a module of this repository in a string that is then imported (``"pkg.module:attr"``,
    ``importlib.import_module(f"recipes.{s}")``) where a plain import could be made; the rules above see plain
    imports only. The one exception: a registry's built-in line that defers importing another module (read by
    selectrust/core/plugins.py, the one module that turns strings into imports); such lines count as imports in
    the cycle and layering tests."""
    files = [p for p in _files(*PRODUCT) if p != STRING_IMPORTER]
    # the rule sees what it allows: the families' built-in lines defer importing each family
    assert "eval_hooks.families.mist" in _string_imports(ROOT / "eval_hooks" / "families" / "__init__.py")
    bad = [f"{p.relative_to(ROOT)}:{line} imports {module} by a string"
           for p in files for line, module in _hidden_string_imports(ast.parse(p.read_text()), _module_name(p),
                                                                     p.name == "__init__.py")]
    assert not bad, "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _repo_modules() -> dict[str, Path]:
    """Every module of the repository by the name it is imported as; a test helper module also under its
    bare name (the tests import ``vllm_helpers`` as well as ``tests.chat_server``)."""
    modules = {_module_name(p): p for p in _files(*PRODUCT, "tests")}
    modules.update({p.stem: p for p in _files("tests")})
    return modules


def _import_graph() -> dict[str, set[str]]:
    modules = _repo_modules()
    name = {p: _module_name(p) for p in modules.values()}
    return {name[p]: {name[modules[t]] for t in _imports(p) | _string_imports(p) if t in modules
                      and name[modules[t]] != name[p]} for p in set(modules.values())}


def test_no_import_cycle_anywhere_in_the_repository():
    # module-level and function-level imports alike: a cycle broken only by importing inside a function is
    # still two modules that cannot be understood (or moved) one without the other
    graph = _import_graph()
    assert "trainer.runtime.checkpoint" in graph["trainer.runtime.loop"]  # the graph holds the repository's modules,
    assert "tests.vllm_helpers" in graph["tests.trainer.eval_bridge.test_vllm_training"]  # test helpers under their bare names too
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycle_among_eval_hooks_and_foundation_modules():
    # selectrust.core.io <-> selectrust.core.hf_data was one: DataError now lives below both, in selectrust.core.errors
    modules = {_module_name(p): p for p in _files("eval_hooks", "selectrust")}
    graph = {m: {t for t in _imports(p) if t in modules and t != m} for m, p in modules.items()}
    assert "selectrust.core.errors" in graph["selectrust.core.hf_data"]  # the checker sees the edges
    assert not (cycles := _cycles(graph)), "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


FAMILY_REGISTRY = ROOT / "eval_hooks" / "families" / "__init__.py"
MENTIONS_FAMILY = re.compile(r"famil(y|ies)", re.IGNORECASE)


def _names_a_family(node: ast.AST) -> bool:
    """An expression that holds a family or its name: a name, attribute or ``["family"]`` item whose identifier
    says family (``cfg.eval.family``, ``family.name``, ``get_family(x).name``, ``row["family"]``, ``families``)."""
    for sub in ast.walk(node):
        ident = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else \
            sub.slice.value if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) else None
        if isinstance(ident, str) and MENTIONS_FAMILY.search(ident):
            return True
    return False


def _is_literal(node: ast.AST) -> bool:
    """A string literal, or a tuple, list or set of them (``"med"``, ``("mist", "med")``)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_literal(e) for e in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _family_choices_by_name(tree: ast.AST) -> list[int]:
    """Lines that choose by a family's name: a comparison (``==``, ``!=``, ``in``, ``not in``, ``is``) between an
    expression holding a family and a string literal, a ``match`` on one with string cases, or a dispatch table
    keyed by two or more built-in family names."""
    from eval_hooks.families import BUILTIN

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_family(x) for x in sides) and any(_is_literal(x) for x in sides):
                lines.append(node.lineno)
        elif isinstance(node, ast.Match) and _names_a_family(node.subject):
            if any(isinstance(c.pattern, ast.MatchValue) and _is_literal(c.pattern.value) for c in node.cases):
                lines.append(node.lineno)
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if len(set(keys) & set(BUILTIN)) >= 2:
                lines.append(node.lineno)
    return sorted(lines)


def test_the_family_choice_finder():
    code = ('if family == "med": pass\nif cfg.eval.family != "taste": pass\nif cfg.eval.family in ("mist", "box2"): '
            'pass\nif "med" in families: pass\nif get_family(x).name == "mist": pass\nif row["family"] == "box2": pass\n'
            'table = {"mist": f, "med": g}\nmatch cfg.eval.family:\n    case "med": pass\n'
            # not choices by a family's name: another setting compared with a word, a family asked by capability,
            # the registry looked up by a variable
            'if d.source == "mist": pass\nif get_family(cfg.eval.family).knowledge_labels: pass\n'
            'if name in family_names(): pass\nif n == 2: pass\n')
    assert _family_choices_by_name(ast.parse(code)) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_no_family_is_chosen_by_name_outside_the_registry():
    """Metrics, reports, the run, the trainers' evaluation, the config checks and the recipes ask the family
    registry (eval_hooks/families/__init__.py) for a family and ask the family what it has (its settings,
    ``knowledge_labels``, ``backend_needs``); none compares a family or its name with a literal. Every module
    of the product is scanned, the registry alone excepted."""
    files = [p for p in _files(*PRODUCT) if p != FAMILY_REGISTRY]
    assert ROOT / "trainer" / "config" / "validation.py" in files and ROOT / "recipes" / "evaluate.py" in files
    bad = [f"{p.relative_to(ROOT)}:{n}: {p.read_text().splitlines()[n - 1].strip()}"
           for p in files for n in _family_choices_by_name(ast.parse(p.read_text()))]
    assert not bad, "\n".join(bad)


# ---- the layout of trainer/ (docs/architecture.md#layout) -------------------------------------------

def test_nothing_below_the_recipes_imports_them():
    # the recipes are entry points; the stage runner that calls their run functions is recipes/stages/, above them,
    # handed the run functions by name: nothing of the foundation, the evaluation, the trainer, launch or the demos
    # imports recipes (the demos get the runner itself from recipes/demo.py)
    bad = _offenders(("selectrust", "eval_hooks", "trainer", "launch", "demos"), {"recipes"})
    assert not bad, "\n".join(bad)
    assert "recipes.stages" in _imports(ROOT / "recipes" / "chain.py")  # the checker sees the runner's users


def test_the_bench_imports_no_recipe():
    # the bench times each algorithm's step where it lives (trainer/dpo/step.py, trainer/rl/step.py, ...)
    assert "trainer.dpo.step" in _imports(ROOT / "bench" / "bench_real_model.py")  # the checker sees the bench
    assert not (bad := _offenders(("bench",), {"recipes"})), "\n".join(bad)


def test_only_the_config_layer_imports_the_config():
    # trainer/config/ composes and checks the entry points' configs; nothing below reaches up into it (its error,
    # ConfigError, is the foundation's: selectrust/core/errors.py). The entry points (recipes/) and the demos'
    # schema use it.
    assert "selectrust.core.errors" in _imports(ROOT / "trainer" / "runtime" / "run_dir.py")  # the checker sees it
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in _files("trainer", "selectrust", "eval_hooks")
           if p.relative_to(ROOT).parts[:2] != ("trainer", "config")
           for m in sorted(_imports(p)) if m.split(".")[:2] == ["trainer", "config"]]
    assert not bad, "\n".join(bad)


#: What each training recipe may define at its top level: its entry point's run and main. Distillation's entry point
#: (``distill``) runs the stages of ``pipeline.kind`` (``pipeline``, ``main``); each stage is ``distill_stage``'s run, a
#: module of its own so that the stage table (``recipes/stage_recipes.py``) and the entry point do not import each
#: other. Its step, data and settings are in its package.
RECIPE_DEFINITIONS = {"dpo": {"run", "main"}, "sft": {"run", "main"}, "grpo": {"run", "main"},
                      "distill": {"pipeline", "main"}, "distill_stage": {"run"}}
ALGORITHM_HOMES = {"dpo": "trainer/dpo", "sft": "trainer/sft", "grpo": "trainer/rl", "distill": "trainer/distill",
                   "distill_stage": "trainer/distill"}


def test_each_algorithm_has_one_home():
    # the recipe keeps run(cfg) and main; the step is in the algorithm's package, and so is its data
    for recipe, allowed in RECIPE_DEFINITIONS.items():
        tree = ast.parse((ROOT / "recipes" / f"{recipe}.py").read_text())
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        assert defined <= allowed, f"recipes/{recipe}.py defines {sorted(defined - allowed)}: move it to its package"
        assert (ROOT / ALGORITHM_HOMES[recipe]).is_dir()
    steps = {"dpo": "trainer/dpo/step.py", "sft": "trainer/sft/step.py", "grpo": "trainer/rl/step.py",
             "distill": "trainer/distill/steps.py"}
    assert all((ROOT / path).is_file() for path in steps.values())


def test_the_stage_runner_modules_are_short():
    # the stage runner (recipes/stages/) is split by concern: no module over 400 lines, no function over 80
    long = {k: n for k, n in _module_lines(("recipes/stages",)).items() if n > 400}
    assert not long, long
    bad = [f"{p.relative_to(ROOT)}:{n.lineno} {n.name}: {length}" for p, n, length in _functions(("recipes/stages",))
           if length > 80]
    assert not bad, "\n".join(bad)


def test_models_do_not_reach_up_into_the_config():
    # the model layers are used by the config checks (adapter checks), not the other way round: the config converts
    # the model layer's errors into ConfigError (trainer/config/validation.py check_adapter_dir)
    assert "selectrust.model.adapter" in _imports(ROOT / "selectrust" / "model" / "policy.py")  # the checker sees it
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in _files("trainer/logprobs", "selectrust/model")
           for m in sorted(_imports(p)) if m.split(".")[:2] == ["trainer", "config"]]
    assert not bad, "\n".join(bad)


def test_trainer_runtime_imports_neither_rl_nor_distill():
    # the machinery every trainer shares knows no single trainer's own code
    assert "trainer.runtime.checkpoint" in _imports(ROOT / "trainer" / "runtime" / "loop.py")  # the checker sees runtime
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in _files("trainer/runtime") for m in sorted(_imports(p))
           if m.split(".")[:2] in (["trainer", "rl"], ["trainer", "distill"])]
    assert not bad, "\n".join(bad)


def _private_module_owner(module: str) -> str | None:
    """The package that owns ``module`` if it or one of its packages is private (a ``_``-prefixed name other
    than a dunder), else None: ``eval_hooks.metrics._common`` -> ``eval_hooks.metrics``."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_the_private_module_finder():
    assert _private_module_owner("eval_hooks.metrics._common") == "eval_hooks.metrics"
    assert _private_module_owner("_vllm_helpers") == ""
    assert _private_module_owner("eval_hooks.__main__") is None
    assert _private_module_owner("trainer.runtime.loop") is None


def test_no_folder_reaches_into_another_folders_private_modules():
    modules = _repo_modules()
    bad = []
    for p in sorted(set(modules.values())):
        here = ".".join(p.relative_to(ROOT).parts[:-1])  # the importing file's folder, as a package name
        for m in sorted(_imports(p)):
            if m not in modules:
                continue  # not a module of the repository (a third-party module, or a name: ``from a import _f``)
            owner = _private_module_owner(m)
            if owner is None:
                continue
            owner = owner or "tests"  # a bare private name is a test helper (tests/ is on the tests' path)
            if here != owner:
                bad.append(f"{p.relative_to(ROOT)} imports {m} (private to {owner.replace('.', '/')}/)")
    assert not bad, "\n".join(bad)
    # no module of the repository is private today (the tests' shared helpers lost their underscore when the tests
    # moved into folders that mirror the code: tests/chat_server.py, vllm_helpers.py, ...); the finder is checked on
    # names in test_the_private_module_finder, so a private module added later is held to the rule


# ---- sys.path --------------------------------------------------------------------------------------

SYS_PATH_EDITS = ("insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__delitem__")


def _sys_path_edits(tree: ast.AST) -> list[int]:
    """Lines that change ``sys.path``: a call of one of its mutating methods, or an assignment to it (or to an
    item or slice of it)."""
    def is_sys_path(node) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                and node.value.id == "sys")

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_sys_path(node.func.value) \
                and node.func.attr in SYS_PATH_EDITS:
            lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value)):
                    lines.append(node.lineno)
    return sorted(lines)


def test_the_sys_path_edit_finder():
    found = _sys_path_edits(ast.parse("import sys\nsys.path.insert(0, 'x')\nsys.path += ['y']\nsys.path[:0] = ['z']\n"
                                      "sys.path = []\nprint(sys.path)\nfound = sys.path[0]\n"))
    assert found == [2, 3, 4, 5]


def test_nothing_edits_sys_path():
    # the package is installed (pip install -e .); a copy that is not (launch/gpu_check.sh) or a checkout
    # under test (tests/conftest.py) names itself in PYTHONPATH instead
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in _files(*PRODUCT, "tests") for n in _sys_path_edits(ast.parse(p.read_text()))]
    assert not bad, "sys.path edited at " + ", ".join(bad)


def test_importing_the_config_schemas_does_not_import_torch():
    # --help and composition read the schemas only: they must not pay torch's import time
    code = ("import sys\nimport trainer.config.choices, trainer.config.schemas, trainer.config.roots, "
            "trainer.config.composition, trainer.config.validation, trainer.config.cli_help, trainer.config\n"
            "assert trainer.config.schemas.GRPOAlgoConfig().std_scaling == 'group'\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    # the probe is able to see torch when it is imported
    seen = subprocess.run([sys.executable, "-c", "import sys, trainer.algos.grpo; print('torch' in sys.modules)"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert seen.stdout.strip() == "True", seen.stderr


# ---- function length --------------------------------------------------------------------------------

def _functions(folders: tuple[str, ...]):
    for p in _files(*folders):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield p, node, node.end_lineno - node.lineno + 1


MAX_FUNCTION_LINES = 80


def test_no_function_is_longer_than_80_lines():
    """Every function of the product packages (nested ones and methods too), decorators aside, from ``def`` to
    its last line, docstring included: at most 80 lines (issue 58)."""
    assert set(PRODUCT) == {"selectrust", "trainer", "eval_hooks", "recipes", "launch", "demos", "bench"}
    bad = [f"{p.relative_to(ROOT)}:{n.lineno} {n.name}: {length} lines" for p, n, length in _functions(PRODUCT)
           if length > MAX_FUNCTION_LINES]
    assert not bad, "\n".join(bad)


def test_each_recipe_run_is_under_80_lines():
    runs = [(p, n, length) for p, n, length in _functions(("recipes",)) if n.name == "run" and n.col_offset == 0]
    assert {p.stem for p, _, _ in runs} >= {"dpo", "sft", "grpo", "evaluate", "mine_pairs"}
    bad = [f"{p.relative_to(ROOT)} run: {length} lines" for p, _, length in runs if length >= 80]
    assert not bad, "\n".join(bad)


# ---- registries (selectrust/core/plugins.py) -------------------------------------------------------------

ENTRY_POINT_READERS = ("entry_points", "iter_entry_points")


def _entry_point_reads(tree: ast.AST) -> list[int]:
    """Lines that read installed packages' entry points: a call of ``entry_points`` / ``iter_entry_points`` (a
    name or an attribute, ``importlib.metadata.entry_points(...)``), or an import of one of them."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) \
                    in ENTRY_POINT_READERS:
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any(a.name in ENTRY_POINT_READERS for a in node.names):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_the_entry_point_read_finder():
    code = ("from importlib.metadata import entry_points\nimport importlib.metadata as md\nmd.entry_points(group='g')\n"
            "entry_points(group='g')\nimport pkg_resources\npkg_resources.iter_entry_points('g')\n"
            # not reads: an EntryPoint built from a known value, the word in a string
            "from importlib.metadata import EntryPoint\nEntryPoint('a', 'm:f', 'g').load()\nx = 'entry_points('\n")
    assert _entry_point_reads(ast.parse(code)) == [1, 3, 4, 6]


def test_entry_points_are_read_in_one_product_module():
    """Entry-point discovery exists once: selectrust/core/plugins.py's ``entry_points``, used by every ``Registry``."""
    readers = sorted(str(p.relative_to(ROOT)) for p in _files(*PRODUCT) if _entry_point_reads(ast.parse(p.read_text())))
    assert readers == ["selectrust/core/plugins.py"], readers




def _registry_bindings(tree: ast.Module) -> list[str]:
    """Module-level names bound to a registry: annotated ``Registry[...]``, or assigned a call of ``Registry`` or of a
    function that builds one (``callable_registry``)."""
    def builds_one(value) -> bool:
        f = value.func if isinstance(value, ast.Call) else None
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        return name == "Registry" or name.endswith("_registry")

    out = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            note = node.annotation.value if isinstance(node.annotation, ast.Subscript) else node.annotation
            if (isinstance(note, ast.Name) and note.id == "Registry") or (node.value and builds_one(node.value)):
                out.append(node.target.id)
        elif isinstance(node, ast.Assign) and builds_one(node.value):
            out += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return out


def test_the_registry_binding_finder():
    code = ("A: Registry[int] = make()\nB = Registry('k', 'g', {})\nC = callable_registry('k')\nD = {'x': 1}\n"
            "E = B\nF: dict = {}\ndef f():\n    G = Registry('k', 'g', {})\n")
    assert _registry_bindings(ast.parse(code)) == ["A", "B", "C"]


def test_every_registry_of_named_components_is_a_plugins_registry():
    """Every lookup by name is a ``Registry`` (rule 14): backends, families, answer types, data sources, DPO losses,
    environments, rewards, root schemas, stage recipes, tiny presets, GGUF packages, demos and demo arms, each with its
    own entry-point group ``selectrust.<kind>``; every registry the product binds at module level is one of them, and
    docs/architecture.md's rule 14 names each group."""
    import importlib

    from selectrust.core.plugins import Registry

    bound = {(_module_name(p), name) for p in _files(*PRODUCT) for name in _registry_bindings(ast.parse(p.read_text()))}
    assert bound == set(REGISTRIES.values()), f"not listed: {sorted(bound - set(REGISTRIES.values()))}; " \
                                              f"gone: {sorted(set(REGISTRIES.values()) - bound)}"
    for group, (module, name) in REGISTRIES.items():
        registry = getattr(importlib.import_module(module), name)
        assert isinstance(registry, Registry) and registry.group == group, (module, name, type(registry))
    rule = re.search(r"^14\. (.*?)^15\. ", (ROOT / "docs" / "architecture.md").read_text(), re.S | re.M)
    assert rule is not None, "docs/architecture.md has no rule 14"
    assert not (missing := [g for g in REGISTRIES if f"`{g}`" not in rule.group(1)]), f"rule 14 omits {missing}"


# ---- answer types (eval_hooks/parsers/__init__.py: the registry) ------------------------------------------------

PARSERS = ROOT / "eval_hooks" / "parsers"
MAX_PARSER_MODULE_LINES = 400


def _answer_type_choices_by_name(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines that choose by an answer type's name: a comparison (``==``, ``!=``, ``in``, ``not in``, ``is``) of
    anything with a string literal (or a tuple, list or set of them) naming a registered answer type
    (``answer_type == "numeric"``, ``at in ("short_text",)``). A name used as a dict key (``row["label"]``) is
    not a comparison with it."""
    def names_one(node: ast.AST) -> bool:
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return _is_literal(node) and any(isinstance(e, ast.Constant) and e.value in names for e in elts)

    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.Compare) and any(names_one(x) for x in [node.left, *node.comparators]))


def test_the_answer_type_choice_finder():
    names = {"numeric", "short_text", "label"}
    code = ('if answer_type == "numeric": pass\nif at != "short_text": pass\nif row["answer_type"] in ("label", "x"): '
            'pass\nif "numeric" == t: pass\n'
            # not choices by an answer type's name: a dict key, another word, a family's list of accepted names
            'if it["label"] == v: pass\nif kind == "essay": pass\nANSWER_TYPES = ("numeric", "label")\n')
    assert _answer_type_choices_by_name(ast.parse(code), names) == [1, 2, 3, 4]


def test_no_answer_type_is_chosen_by_name_outside_the_registry():
    """A new answer type is one registry entry (eval_hooks/parsers/__init__.py: BUILTIN, register_answer_type or the
    selectrust.answer_types entry points): no module of the product outside the answer types' package compares an
    answer-type name with a literal; it asks the type's entry (leaked_answer, MIST's wrong-value check, ...)."""
    from eval_hooks.parsers import ANSWER_TYPES

    names = set(ANSWER_TYPES)
    assert {"numeric", "short_text", "label", "choice"} <= names
    files = [p for p in _files(*PRODUCT) if PARSERS not in p.parents]
    assert ROOT / "eval_hooks" / "builders" / "workflows.py" in files
    bad = [f"{p.relative_to(ROOT)}:{n}: {p.read_text().splitlines()[n - 1].strip()}"
           for p in files for n in _answer_type_choices_by_name(ast.parse(p.read_text()), names)]
    assert not bad, "\n".join(bad)


def test_each_parsers_module_is_under_400_lines():
    modules = sorted(PARSERS.glob("*.py"))
    assert {p.name for p in modules} >= {"__init__.py", "markers.py", "numeric.py", "choice.py", "short_text.py"}
    bad = [f"{p.relative_to(ROOT)}: {n} lines" for p in modules if (n := len(p.read_text().splitlines())) >= 400]
    assert not bad, "\n".join(bad)


# ---- module size and names ------------------------------------------------------------------------------

MAX_MODULE_LINES = 600
#: Product modules allowed over MAX_MODULE_LINES, each until its split lands (none now).
OVER_LIMIT: set[str] = set()


def _module_lines(folders: tuple[str, ...]) -> dict[str, int]:
    return {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in _files(*folders)}


def test_no_product_module_is_longer_than_600_lines():
    lines = _module_lines(tuple(f for f in PRODUCT if f != "bench"))  # bench: measurement scripts, excepted
    bad = [f"{p}: {n} lines" for p, n in sorted(lines.items()) if n > MAX_MODULE_LINES and p not in OVER_LIMIT]
    assert not bad, "\n".join(bad)
    stale = [p for p in sorted(OVER_LIMIT) if lines.get(p, 0) <= MAX_MODULE_LINES]
    assert not stale, f"no longer over {MAX_MODULE_LINES} lines: remove from OVER_LIMIT: {stale}"
    # the counter counts: the vLLM client is a few hundred lines
    assert 300 < lines["selectrust/generation/backends/vllm_server.py"] <= MAX_MODULE_LINES


def _stems(folder: str) -> set[str]:
    return {p.stem for p in _files(folder) if p.stem != "__init__"}


def test_no_launcher_module_shares_a_name_with_a_backend_module():
    # the vLLM server's launcher and the client that talks to the server it starts are told apart by name
    launch, backends = _stems("launch"), _stems("selectrust/generation/backends")
    assert {"vllm_launcher", "sweep"} <= launch and {"vllm_server", "reference_server"} <= backends
    assert not (same := sorted(launch & backends)), \
        f"launch/ and selectrust/generation/backends/ both have modules named {same}"


# ---- one owner of "give me a model" (selectrust/model/), one file hasher (selectrust/core/hashing.py) --------------

_PRETRAINED = re.compile(r"^(Auto\w*|\w+ForCausalLM|\w*Tokenizer\w*)$")  # transformers' model/config/tokenizer


def _pretrained_loads(tree: ast.AST) -> list[int]:
    """Lines that call ``<transformers class>.from_pretrained``: an ``Auto*`` class, a ``*ForCausalLM`` or a tokenizer
    class (``PeftModel.from_pretrained``, an adapter put on a model already loaded, is not one)."""
    return sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and n.func.attr == "from_pretrained" and isinstance(n.func.value, ast.Name)
                  and _PRETRAINED.match(n.func.value.id))


def test_the_pretrained_load_finder():
    code = ("AutoModelForCausalLM.from_pretrained(p)\nAutoTokenizer.from_pretrained(p)\n"
            "PeftModel.from_pretrained(m, a)\nLlamaForCausalLM.from_pretrained(p)\n"
            "AutoModelForCausalLM.from_config(c)\n")
    assert _pretrained_loads(ast.parse(code)) == [1, 2, 4]


def test_only_eval_hooks_model_loads_a_model_or_tokenizer():
    # one owner of "give me a model": sources, the cache, loading, adapters and the training policy are all in
    # selectrust/model/ (bench/ measures transformers' and TRL's own loaders against ours, and is excepted)
    owner = ROOT / "selectrust" / "model"
    assert _pretrained_loads(ast.parse((owner / "load.py").read_text()))  # the finder sees the owner's loads
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in _files(*(f for f in PRODUCT if f != "bench"))
           if owner not in p.parents for n in _pretrained_loads(ast.parse(p.read_text()))]
    assert not bad, "a model or tokenizer loaded outside selectrust/model/ at " + ", ".join(bad)
    assert not [p for p in _files("trainer/logprobs") if p.stem in ("policy", "adapter_check")]  # no second home


def _file_hashers(tree: ast.AST) -> list[str]:
    """Functions that feed a file's bytes to ``hashlib``: a ``hashlib.*`` call and a file read (``open(...)`` or
    ``.read_bytes()``) in the same function."""
    out = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        calls = [n.func for n in ast.walk(fn) if isinstance(n, ast.Call)]
        hashes = any(isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "hashlib"
                     for f in calls)
        reads = any((isinstance(f, ast.Name) and f.id == "open") or (isinstance(f, ast.Attribute)
                                                                      and f.attr == "read_bytes") for f in calls)
        if hashes and reads:
            out.append(fn.name)
    return out


def test_the_file_hasher_finder():
    code = ("import hashlib\ndef a(p):\n    return hashlib.sha256(open(p, 'rb').read()).hexdigest()\n"
            "def b(p):\n    return hashlib.sha256(p.read_bytes()).hexdigest()\n"
            "def c(s):\n    return hashlib.sha256(s.encode()).hexdigest()\n")
    assert _file_hashers(ast.parse(code)) == ["a", "b"]


# adapter_checksum streams the files' bytes themselves (not their sha256) into one digest: the value the vLLM server
# names a served adapter by and CHECKSUM.sha256 holds; it stays what it is, so the served names do not change
_OTHER_DIGESTS = {("selectrust/generation/backends/adapter_checksum.py", "adapter_checksum")}


def test_exactly_one_file_hash_helper_in_product_code():
    found = {(p.relative_to(ROOT).as_posix(), name) for p in _files(*PRODUCT)
             for name in _file_hashers(ast.parse(p.read_text()))}
    assert found - _OTHER_DIGESTS == {("selectrust/core/hashing.py", "file_sha256")}, sorted(found)
    defined = [p.relative_to(ROOT).as_posix() for p in _files(*PRODUCT) for n in ast.walk(ast.parse(p.read_text()))
               if isinstance(n, ast.FunctionDef) and n.name in ("file_sha256", "tree_sha256", "_sha256")]
    assert defined == ["selectrust/core/hashing.py"], defined


def test_the_model_entry_exports_its_calls_without_importing_torch():
    # the config checks (trainer/config/validation.py) and the CLIs reach selectrust.model before any model loads
    code = ("import sys, selectrust.model as m\nassert all(hasattr(m, n) for n in m.__all__)\n"
            "assert {'load_model', 'load_tokenizer', 'load_policy'} <= set(m.__all__)\nprint('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ---- the real demo's arms ----------------------------------------------------------------------------

ARM_REGISTRY = Path("demos") / "real" / "arms.py"


def _arm_name_compares(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of ``tree`` comparing something with an arm name literal (``x == "scope"``, ``"scope" in r``,
    ``x in ("base", "scope")``)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            items = [e for s in sides for e in (s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s])]
            if any(isinstance(e, ast.Constant) and e.value in names for e in items):
                lines.append(node.lineno)
    return lines


def test_no_demo_arm_name_is_compared_outside_the_arm_registry():
    # what an arm does, how it is labelled, coloured and checked is its entry's (demos/real/arms.py): the real demo,
    # the shared demo modules and the demo entry point never branch on an arm's name (the toy demo has no registry)
    from demos.real.arms import ARMS

    names = set(ARMS.builtin)
    assert {"base", "scope", "scope_grpo"} <= names
    probe = ast.parse('arm == "scope"\n"misleading_only" in r\na in ("x", "base")\na == b\nr.get("scope")')
    assert _arm_name_compares(probe, names) == [1, 2, 3]  # the checker sees all three forms, and only them
    files = [*_files("demos/real"), *sorted((ROOT / "demos").glob("*.py")), ROOT / "recipes" / "demo.py"]
    assert ROOT / ARM_REGISTRY in files
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in files if p.relative_to(ROOT) != ARM_REGISTRY
           for n in _arm_name_compares(ast.parse(p.read_text()), names)]
    assert not bad, "an arm name compared outside demos/real/arms.py: " + ", ".join(bad)


# ---- eval_hooks' rooms ----------------------------------------------------------------------------------------

#: The root of eval_hooks holds the public evaluation entry points only; everything else sits in a named room.
EVAL_ROOT_MODULES = {"__init__", "__main__", "evaluate", "knowledge", "report", "folds", "cli_contract"}
#: The rooms of the foundation (selectrust/) and the rooms each may import: core below model below generation.
FOUNDATION_ROOMS = {"core": set(), "model": {"core"}, "generation": {"core", "model"}}
#: The rooms of eval_hooks (what each may import inside eval_hooks is the layering test's).
EVAL_ROOMS = {"parsers", "families", "builders", "metrics", "scoring", "data"}
#: eval_hooks' rooms with Python modules, from the bottom up (docs/architecture.md#eval_hooks-in-rooms): each may
#: import the rooms below it and never one above; the root's modules (EVAL_ROOT_MODULES, the entry points) stand
#: above every room, and no room imports them.
EVAL_ORDER = ("parsers", "metrics", "scoring", "families", "builders")


def _foundation_room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "selectrust":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in FOUNDATION_ROOMS else "root"


def test_the_eval_hooks_root_holds_only_the_evaluation_entry_points():
    root = ROOT / "eval_hooks"
    modules = {p.stem for p in root.glob("*.py")}
    folders = {p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert modules == EVAL_ROOT_MODULES, f"eval_hooks/ root: unexpected {sorted(modules ^ EVAL_ROOT_MODULES)}"
    assert folders == EVAL_ROOMS, f"eval_hooks/ rooms: unexpected {sorted(folders ^ EVAL_ROOMS)}"


def test_the_foundation_rooms_import_only_downward():
    bad = []
    for room, allowed in FOUNDATION_ROOMS.items():
        for path in _files(f"selectrust/{room}"):
            for module in sorted(_imports(path)):
                other = _foundation_room(module)
                if other is not None and other != room and other not in allowed:
                    bad.append(f"{path.relative_to(ROOT)} imports {module} (room {other!r})")
    assert not bad, "\n".join(bad)


def _eval_room(module: str) -> str | None:
    """The room of an eval_hooks module (one of EVAL_ORDER), ``"root"`` for the package itself and a module at its
    root, None outside eval_hooks."""
    parts = module.split(".")
    if parts[0] != "eval_hooks":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in EVAL_ORDER else "root"


def _upward_eval_imports(module: str, imports: set[str]) -> list[str]:
    """What ``module`` imports of eval_hooks that stands above its room: a higher room or the root."""
    here = _eval_room(module)
    if here in (None, "root"):
        return []
    return sorted(m for m in imports if (there := _eval_room(m)) is not None
                  and (there == "root" or EVAL_ORDER.index(there) > EVAL_ORDER.index(here)))


def test_the_eval_hooks_order_finder():
    # a probe module in metrics/: module-level, function-level and string imports of the rooms above it and of the
    # root are found; its own room, the rooms below and other packages are not
    probe = ast.parse("from ..parsers import parse_answer\nfrom . import common\nfrom selectrust.core.io import x\n"
                      "from ..families import get_family\n"
                      "def f():\n    from eval_hooks.builders.gsm8k import build_file\n    import eval_hooks.evaluate\n"
                      "    from eval_hooks import compute_metrics\n"
                      "TABLE = Registry('k', 'g', {'x': 'eval_hooks.scoring.publish:publish_outputs'})\n")
    name = "eval_hooks.metrics.probe"
    found = _upward_eval_imports(name, _imports_of(probe, name) | {m for _, m in _string_imports_of(probe, name)})
    assert found == ["eval_hooks", "eval_hooks.builders.gsm8k", "eval_hooks.builders.gsm8k.build_file",
                     "eval_hooks.compute_metrics", "eval_hooks.evaluate", "eval_hooks.families",
                     "eval_hooks.families.get_family", "eval_hooks.scoring.publish"]
    assert _upward_eval_imports("eval_hooks.report", {"eval_hooks.builders.gsm8k"}) == []  # the root may
    assert _eval_room("eval_hooks.scoring.report_kit") == "scoring" and _eval_room("eval_hooks.folds") == "root"


def test_eval_hooks_rooms_import_only_downward():
    """parsers -> metrics -> scoring -> families -> builders -> the root's entry points, bottom to top: no module of
    a room imports (at module level, inside a function, or by a registry's string) a room above it or the root."""
    assert set(EVAL_ORDER) | {"data"} == EVAL_ROOMS  # every room with code has its place in the order
    files = _files("eval_hooks")
    bad = [f"{p.relative_to(ROOT)} imports {m} (room {_eval_room(m)})" for p in files
           for m in _upward_eval_imports(_module_name(p), _imports(p) | _string_imports(p))]
    assert not bad, "\n".join(bad)
    # the test sees the downward imports it allows: the families' metrics and report pieces, a builder's family
    assert "eval_hooks.scoring.report_kit" in _imports(ROOT / "eval_hooks" / "families" / "mist" / "report.py")
    assert "eval_hooks.families.box2" in _imports(ROOT / "eval_hooks" / "builders" / "workflows.py")


def test_the_room_finder():
    assert _foundation_room("selectrust.core.io.DataError") == "core"
    assert _foundation_room("selectrust.model.load") == "model" and _foundation_room("selectrust") == "root"
    assert _foundation_room("trainer.runtime.run") is None


# ---- imports at module level (rule 19) -----------------------------------------------------------------------

DEFERRED_REASON = re.compile(r"#\s*deferred: \S")


def _unexplained_function_imports(source: str) -> list[int]:
    """Lines of the imports directly in a function body (not under ``try`` / ``if``) that carry no
    ``# deferred: <why>`` comment on their own lines."""
    lines = source.splitlines()
    return [st.lineno for fn in ast.walk(ast.parse(source)) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            for st in fn.body if isinstance(st, (ast.Import, ast.ImportFrom))
            and not any(DEFERRED_REASON.search(lines[n - 1]) for n in range(st.lineno, st.end_lineno + 1))]


def test_the_unexplained_function_import_finder():
    code = ("import os\ndef f():\n    import torch  # deferred: imports torch\n    import numpy\n    x = 1\n"
            "    from a import (  # deferred: tests patch it\n        b)\ndef g():\n    try:\n        import c\n"
            "    except ImportError:\n        c = None\n")
    assert _unexplained_function_imports(code) == [4]


def test_every_import_left_in_a_trainer_or_recipe_function_says_why():
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in _files("trainer", "recipes")
           for n in _unexplained_function_imports(p.read_text())]
    assert not bad, ("import inside a function without '# deferred: <why>' (docs/architecture.md rule 19): "
                     + ", ".join(bad))
