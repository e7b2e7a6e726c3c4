"""The public API (``from rocketidx import ...``): every name in ``__all__`` resolves, ``import rocketidx`` loads
no Spark, and the README's Python example runs as written on a small store."""
from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import rocketidx
from rocketidx.commitlog.generate import GenConfig, generate_store

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_public_name_resolves():
    assert set(rocketidx.__all__) >= {"build_index", "open_index", "verify_index", "index_stats"}
    for name in rocketidx.__all__:
        assert callable(getattr(rocketidx, name)), name


def test_every_name_in_every_modules_all_resolves():
    """Every package and module under rocketidx/ (rocketidx.spark's too: importing pyspark starts no JVM): each
    name its ``__all__`` promises can be fetched. A lazy map naming a module that moved fails here."""
    missing = []
    for info in pkgutil.walk_packages(rocketidx.__path__, "rocketidx."):
        if info.name.rsplit(".", 1)[-1] == "__main__":  # importing it would run the command line
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", ()):
            try:
                getattr(module, name)
            except (AttributeError, ImportError) as e:
                missing.append(f"{info.name}.{name}: {e!r}")
    assert not missing, missing


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'build_indexes'"):
        rocketidx.build_indexes  # noqa: B018


def test_importing_the_api_loads_no_spark():
    code = ("import sys; from rocketidx import build_index, open_index, verify_index, index_stats; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def python_example() -> str:
    text = README.read_text()
    start = text.index("```python\nfrom rocketidx import")
    return text[start + len("```python\n"):text.index("```", start + 10)]


def test_the_readme_example_runs_as_written(tmp_path, monkeypatch):
    generate_store(tmp_path / "sample" / "store", GenConfig(messages=3000, segment_bytes=1 << 20, seed=5))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(python_example(), "README.md", "exec"), scope)  # noqa: S102
    assert scope["summary"].entries > 3000 and len(scope["files"]) == scope["summary"].files
    assert scope["report"].clean
    assert scope["stats"].summary()["entries"] == scope["summary"].entries
    assert "pyspark" not in sys.modules or scope["stats"].__class__.__module__ == "rocketidx.stats.local"
