"""The package's shape: Spark stays in rocketidx/spark, the import graph has no cycle, and the pipeline's
modules import only the stages before them (segments -> messages -> entries -> windows -> indexfile ->
output -> build). Imports inside functions count: a lazy import is still a dependency."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rocketidx

PACKAGE = Path(rocketidx.__file__).resolve().parent
PIPELINE = ["segments", "messages", "entries", "windows", "indexfile", "output", "build"]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = ("rocketidx",) + path.relative_to(package).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Every module name an import statement anywhere in the tree names (``from a import b`` gives
    ``a`` and ``a.b``: b may be a module)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_package else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the rocketidx modules it imports, anywhere in its code."""
    files = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = set()
        for dep in imported_names(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            while dep and dep not in files:
                dep = dep.rpartition(".")[0]
            if dep and dep != name and dep != "rocketidx":
                deps.add(dep)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_rocketidx_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_the_cycle_finder_sees_a_lazy_import(tmp_path):
    pkg = tmp_path / "rocketidx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from rocketidx import b\n")
    (pkg / "b.py").write_text("def f():\n    from rocketidx.a import x\n")
    assert find_cycle(import_graph(pkg)) == ["rocketidx.a", "rocketidx.b", "rocketidx.a"]
    (pkg / "b.py").write_text("def f():\n    import rocketidx.errors\n")
    assert find_cycle(import_graph(pkg)) is None


def test_pipeline_modules_import_only_earlier_stages():
    graph = import_graph()
    rank = {f"rocketidx.{m}": i for i, m in enumerate(PIPELINE)}
    upward = [(m, d) for m, deps in graph.items() if m in rank for d in deps if d in rank and rank[d] > rank[m]]
    assert upward == []


def test_only_rocketidx_spark_imports_pyspark():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if name == "rocketidx.spark" or name.startswith("rocketidx.spark."):
            continue
        names = imported_names(ast.parse(path.read_text()), name, path.name == "__init__.py")
        offenders += [f"{name}: {n}" for n in sorted(names) if n == "pyspark" or n.startswith("pyspark.")]
    assert offenders == []


@pytest.mark.parametrize("module", sorted(m for m in (module_name(p) for p in PACKAGE.rglob("*.py"))
                                          if not m.startswith("rocketidx.spark") and m != "rocketidx.__main__"))
def test_importing_a_core_module_loads_no_pyspark(module):
    code = f"import sys, {module}; print('pyspark' in sys.modules or any(m.startswith('py4j') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
