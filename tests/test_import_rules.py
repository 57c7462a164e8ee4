"""The layer rules of docs/architecture.md, checked on the code by parsing every import with ``ast``
(module-level and function-level imports alike), and the function-length limits of the style guide."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("trainer", "eval_hooks", "recipes", "launch", "bench", "toy_demo")
BY_PATH = ("spec_from_file_location", "module_from_spec", "SourceFileLoader", "exec_module", "run_path", "load_source")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module named by an import in ``path`` (relative imports resolved; ``from a import b`` gives
    both ``a`` and ``a.b``, since ``b`` may be a submodule)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
    # the checker itself: a relative import (``from .checkpoint import ...`` in trainer/core/loop.py), an absolute
    # from-import naming a class, a function-level import (trainer/core/loop.py imports tqdm inside train_loop)
    assert "trainer.core.checkpoint" in _imports(ROOT / "trainer" / "core" / "loop.py")
    assert "tqdm.auto" in _imports(ROOT / "trainer" / "core" / "loop.py")
    assert "eval_hooks.io.DataError" in _imports(ROOT / "trainer" / "data" / "train_data.py")


def test_algos_import_only_torch_and_the_standard_library():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in _files("trainer/algos") for m in sorted(_imports(p))
           if _top(m) not in sys.stdlib_module_names and _top(m) not in ("torch", "__future__")
           and not m.startswith("trainer.algos")]
    assert not bad, "\n".join(bad)


def test_eval_hooks_imports_no_other_layer():
    assert not (bad := _offenders(("eval_hooks",), {"trainer", "recipes", "launch"})), "\n".join(bad)


def test_trainer_never_imports_launch_or_recipes():
    assert not (bad := _offenders(("trainer",), {"recipes", "launch"})), "\n".join(bad)


def test_launch_never_imports_recipes():
    assert not (bad := _offenders(("launch",), {"recipes"})), "\n".join(bad)


def test_the_toy_task_imports_only_eval_hooks():
    # toy_demo/task.py builds data files and serves the toy:<seed>/<file> data source: eval_hooks below it,
    # nothing of the trainer, the recipes, launch or the rest of the demo
    bad = [m for m in sorted(_imports(ROOT / "toy_demo" / "task.py"))
           if _top(m) in ("trainer", "recipes", "launch", "toy_demo")]
    assert not bad, bad
    assert "eval_hooks.io" in _imports(ROOT / "toy_demo" / "task.py")  # the checker sees its imports


def test_only_the_demo_entry_point_imports_the_demo_package():
    bad = [o for o in _offenders(("trainer", "eval_hooks", "launch", "recipes"), {"toy_demo"})
           if not o.startswith(str(Path("recipes") / "demo.py"))]
    assert not bad, "\n".join(bad)
    assert "toy_demo.pipeline" in _imports(ROOT / "recipes" / "demo.py")  # the checker sees the one that may


# What only the demo's toy task knows: its package, its builder, its data source's paths, its generator.
TOY_TASK = re.compile(r"\btoy_demo\b|\bbuilders[./]toy\b|\btoy:(<seed>|\d|\{)|make_toy_task")


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


def test_no_import_cycle_among_trainer_modules():
    modules = {_module_name(p): p for p in _files("trainer")}
    graph = {m: {t for t in _imports(p) if t in modules and t != m} for m, p in modules.items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


# ---- function length --------------------------------------------------------------------------------

def _functions(folders: tuple[str, ...]):
    for p in _files(*folders):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield p, node, node.end_lineno - node.lineno + 1


def test_no_function_is_longer_than_100_lines():
    bad = [f"{p.relative_to(ROOT)}:{n.lineno} {n.name}: {length} lines" for p, n, length in _functions(PRODUCT)
           if length > 100]
    assert not bad, "\n".join(bad)


def test_each_recipe_run_is_under_80_lines():
    runs = [(p, n, length) for p, n, length in _functions(("recipes",)) if n.name == "run" and n.col_offset == 0]
    assert {p.stem for p, _, _ in runs} >= {"dpo", "sft", "grpo", "evaluate", "mine_pairs"}
    bad = [f"{p.relative_to(ROOT)} run: {length} lines" for p, _, length in runs if length >= 80]
    assert not bad, "\n".join(bad)
