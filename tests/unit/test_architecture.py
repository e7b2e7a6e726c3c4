"""The package's shape: one layer per folder, lower layers never import higher ones, no import cycle, and
Spark stays in rocketidx/spark. Imports inside functions count: a lazy import is still a dependency. The
package ``rocketidx`` itself (its ``__init__``, the public API) is the top layer, so no module inside it
may write ``from rocketidx import x``."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rocketidx

PACKAGE = Path(rocketidx.__file__).resolve().parent
EXTENSIONS = {"rocketidx._native"}  # compiled (rocketidx/_native.c): imports nothing of rocketidx

# Lowest first. A module may import modules of a lower layer, and modules of its own folder; never a
# higher layer, nor another folder of its own layer. The top-level modules are one folder.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "layout", "units", "arrays", "storage", "process_cost", "interrupts", "config"),  # shared pieces
    ("commitlog",),  # segments, records, message columns, the entries a record dispatches, splits, readers
    ("index", "consumequeue"),  # the derived files' formats: writer, reader, lookup
    ("output",),  # manifest, local and remote outputs, commit, opening what a build left
    ("build", "query", "broker"),  # one build path; key queries over a directory; a broker's store
    ("verify", "stats"),
    ("backfill",),
    ("spark",),  # the thin shells over the core, and the rocketmq-commitlog source
    ("ops",),  # one entry point per operation: a request in, the engine chosen, a result out (issue 33)
    ("sample", "packaging"),  # off the pipeline: the sample store and the demo's tour of it, make dist's packaging
    ("cli",),
    ("__init__", "__main__"),  # the public API and the console script
]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = ("rocketidx",) + path.relative_to(package).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def folder(module: str) -> str:
    """The folder a module sits in (``build`` for rocketidx.build.task), ``__init__`` for the package
    itself, and its own name for a top-level module (which all share one folder, ``""``, for the rule)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def layer_of(module: str, package: Path = PACKAGE) -> int | None:
    name = folder(module)
    for i, group in enumerate(LAYERS):
        if name in group:
            return i
    return None


def same_folder(a: str, b: str, package: Path = PACKAGE) -> bool:
    fa, fb = folder(a), folder(b)
    if fa == fb:
        return True
    top = set(LAYERS[0])
    return fa in top and fb in top


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
    """Module -> the rocketidx modules it imports, anywhere in its code (``rocketidx`` itself included:
    ``from rocketidx import x`` depends on the package's ``__init__``)."""
    files = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = set()
        for dep in imported_names(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            if dep in EXTENSIONS or dep.rpartition(".")[0] in EXTENSIONS:
                continue
            if dep != "rocketidx" and dep.startswith("rocketidx.") and dep not in files:
                dep = dep.rpartition(".")[0]  # from a.b import c: c is a name in a.b, not a module
            while dep and dep not in files:
                dep = dep.rpartition(".")[0]
            if dep and dep != name:
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


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import that goes up a layer, or sideways into another folder of the same layer."""
    out = []
    for m, deps in sorted(graph.items()):
        for d in sorted(deps):
            lm, ld = layer_of(m), layer_of(d)
            if same_folder(m, d):
                continue
            if ld >= lm:
                out.append(f"{m} (layer {lm}: {folder(m)}) imports {d} (layer {ld}: {folder(d)})")
    return out


def test_every_module_has_a_layer():
    assert [m for m in import_graph() if layer_of(m) is None] == []


def test_every_import_goes_down_a_layer_or_stays_in_its_folder():
    assert layer_violations(import_graph()) == []


def test_no_module_imports_the_package_itself():
    offenders = [m for m, deps in import_graph().items() if "rocketidx" in deps and m != "rocketidx.__main__"]
    assert offenders == []


# What the command line and the spark-submit jobs may import (issue 33): the operations with their request
# and result types, the settings, errors, units, interrupts, the sample store (gen, demo) and cli's helpers.
FRONT_ENDS_MAY_IMPORT = ("rocketidx.ops", "rocketidx.cli", "rocketidx.sample")
FRONT_ENDS_MAY_IMPORT_EXACTLY = {"rocketidx", "rocketidx.config", "rocketidx.errors", "rocketidx.units",
                                 "rocketidx.interrupts"}


def front_end_imports(package: Path = PACKAGE, jobs: Path = PACKAGE.parent / "jobs") -> dict[str, set[str]]:
    """rocketidx module -> the files of cli/ and jobs/ that import it, beyond what they may import."""
    modules = {module_name(p, package) for p in package.rglob("*.py")}
    graph = {m: deps for m, deps in import_graph(package).items() if m.startswith("rocketidx.cli")}
    for path in sorted(jobs.glob("*.py")):
        names = imported_names(ast.parse(path.read_text()), f"jobs.{path.stem}", False)
        graph[f"jobs/{path.name}"] = {n if n in modules else n.rpartition(".")[0] for n in names
                                      if n.startswith("rocketidx")} & modules
    out: dict[str, set[str]] = {}
    for where, deps in graph.items():
        for dep in deps:
            if dep not in FRONT_ENDS_MAY_IMPORT_EXACTLY and not dep.startswith(FRONT_ENDS_MAY_IMPORT):
                out.setdefault(dep, set()).add(where)
    return out


def test_the_command_line_and_the_jobs_go_through_the_operations():
    assert front_end_imports() == {}


def test_the_front_end_rule_catches_a_job_reaching_into_the_library(tmp_path):
    pkg = tmp_path / "rocketidx"
    for rel in ("__init__.py", "cli/__init__.py", "ops/__init__.py", "ops/build.py", "build/__init__.py",
                "build/in_process.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("")
    (pkg / "cli" / "__init__.py").write_text("from rocketidx.ops.build import build\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "nightly.py").write_text("def main():\n    from rocketidx.build.in_process import build_index\n")
    assert front_end_imports(pkg, tmp_path / "jobs") == {"rocketidx.build.in_process": {"jobs/nightly.py"}}


def test_rocketidx_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "rocketidx"
    for rel, text in {"__init__.py": "", **files}.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return pkg


def test_the_cycle_finder_sees_a_lazy_import(tmp_path):
    pkg = _package(tmp_path, {"a.py": "from rocketidx import b\n", "b.py": "def f():\n    from rocketidx.a import x\n"})
    assert find_cycle(import_graph(pkg)) == ["rocketidx.a", "rocketidx.b", "rocketidx.a"]
    (pkg / "b.py").write_text("def f():\n    import rocketidx.errors\n")
    assert find_cycle(import_graph(pkg)) is None


def test_the_layer_rule_catches_an_upward_and_a_sideways_import(tmp_path):
    pkg = _package(tmp_path, {
        "errors.py": "",
        "commitlog/__init__.py": "", "commitlog/records.py": "from rocketidx.errors import E\n",
        "index/__init__.py": "", "index/writer.py": "from rocketidx.commitlog.records import r\n",
        "build/__init__.py": "", "build/task.py": "from rocketidx.index.writer import w\n",
        "query/__init__.py": "", "query/lookup.py": "",
    })
    assert layer_violations(import_graph(pkg)) == []
    (pkg / "commitlog/records.py").write_text("def f():\n    from rocketidx.index.writer import w\n")
    (pkg / "build/task.py").write_text("import rocketidx.query.lookup as q\n")
    assert layer_violations(import_graph(pkg)) == [
        "rocketidx.build.task (layer 4: build) imports rocketidx.query.lookup (layer 4: query)",
        "rocketidx.commitlog.records (layer 1: commitlog) imports rocketidx.index.writer (layer 2: index)"]
    (pkg / "commitlog/records.py").write_text("from rocketidx import errors\n")
    assert "rocketidx.commitlog.records" in [m for m, d in import_graph(pkg).items() if "rocketidx" in d]


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


def test_every_test_folder_is_collected():
    """tests/ mirrors the package, so a test folder may bear a name pytest skips by default (``build``): the
    folders under tests/ that hold tests match none of pyproject.toml's ``norecursedirs``."""
    import fnmatch
    import tomllib
    root = PACKAGE.parent
    skipped = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["norecursedirs"]
    folders = {p.parent.relative_to(root / "tests") for p in (root / "tests").rglob("test_*.py")}
    assert [str(f) for f in folders if any(fnmatch.fnmatch(part, pat) for part in f.parts for pat in skipped)] == []

