"""The public API (``from rocketidx import ...``): every name in ``__all__`` resolves (and in every module's),
``import rocketidx`` loads no Spark, and the README's Python example runs as written on a small store: the
key lookup and the queue lookup give what the CommitLog says, the store check and the repair's plan see a
queue file a broker lost."""
from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import shutil
from pathlib import Path

import pytest

import rocketidx
from rocketidx.commitlog.entries import extract_entry_keys
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.query.lookup import read_messages_at

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_public_name_resolves():
    assert set(rocketidx.__all__) >= {"build_index", "open_index", "verify_index", "index_stats", "query_key",
                                      "open_consumequeues", "query_queue", "verify_store", "repair_store"}
    for name in rocketidx.__all__:
        assert callable(getattr(rocketidx, name)), name
        assert getattr(rocketidx, name).__doc__, f"{name} has no docstring"


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
    # `import *` fetches every name of __all__: the lazy ones import their modules.
    code = ("import sys; from rocketidx import build_index, open_index, verify_index, index_stats; "
            "from rocketidx import *; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def python_example() -> str:
    text = README.read_text()
    start = text.index("```python\nfrom rocketidx import")
    return text[start + len("```python\n"):text.index("```", start + 10)]


BROKER_STORE = "/data/rocketmq/store"  # the README's stopped broker, which the test makes under tmp_path


def broker_store(sample: Path, where: Path) -> Path:
    """The sample's CommitLog with the index and queues a broker writes for it (one sequence: window 0)."""
    shutil.copytree(sample / "commitlog", where / "commitlog")
    built = where.parent / "broker-build"
    rocketidx.build_index(where, built, rocketidx.BuildConfig(targets="index,consumequeue", window_ms=0))
    for part in ("index", "consumequeue"):
        shutil.copytree(built / part, where / part)
    return where


def key_offsets(store: Path, entry: str) -> list[int]:
    """Where the log's messages that make the index entry ``topic#key`` start, newest first: read from the
    CommitLog, not from an index."""
    found = []
    for batch in CommitLogReader(list_segments(store)):
        rows, _, keys = extract_entry_keys(batch)
        phy = batch.column("phy_offset").to_numpy()[rows]
        found += [p for p, k in zip(phy.tolist(), keys.to_pylist()) if k == entry]
    return sorted(set(found), reverse=True)


def test_the_readme_example_runs_as_written(tmp_path, monkeypatch):
    generate_store(tmp_path / "sample" / "store", GenConfig(messages=3000, segment_bytes=1 << 20, seed=5))
    store = broker_store(tmp_path / "sample" / "store", tmp_path / "broker" / "store")
    lost = sorted((store / "consumequeue" / "Topic0" / "0").iterdir())[-1]
    lost.unlink()  # a queue file the broker lost: the store check names it, the repair's plan writes it again
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    code = python_example()
    assert code.count(BROKER_STORE) == 2
    exec(compile(code.replace(BROKER_STORE, str(store)), "README.md", "exec"), scope)  # noqa: S102
    assert scope["summary"].entries > 3000 and len(scope["files"]) == scope["summary"].files
    assert scope["report"].clean
    assert scope["stats"].summary()["entries"] == scope["summary"].entries
    assert "pyspark" not in sys.modules or scope["stats"].__class__.__module__ == "rocketidx.stats.in_process"

    expected = key_offsets(tmp_path / "sample" / "store", "Topic0#K4")
    assert expected and set(expected) <= set(scope["offsets"])  # the broker also returns equal hashes
    exact = rocketidx.query_key("sample/mine", "Topic0", "K4", commitlog="sample/store")
    assert exact == expected

    phy, size, _ = scope["slot"]
    found, _ = read_messages_at("sample/store", [phy])
    message = found.to_pylist()[0]
    assert (message["topic"], message["queue_id"], message["queue_offset"], message["size"]) == ("Topic0", 0, 0, size)
    assert rocketidx.query_queue("sample/queues", "Topic0", 0, 10**9) is None

    checked, plan = scope["checked"], scope["plan"]
    assert not checked.clean and checked.areas["consumequeue"].problems
    assert checked.areas["index"].clean
    assert plan.queues.plan.changes
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before  # a dry run changes nothing

