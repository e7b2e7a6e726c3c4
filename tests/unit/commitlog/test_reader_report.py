"""Which reader ran (issue 24): every read reports ``kernel`` or ``numpy``, the build summary and ``--json``
say ``reader``, and a summary whose reads ran the numpy path warns, with the fix, in one line that is the
only place the words "numpy reader" appear."""
from __future__ import annotations

import json

import pytest

import rocketidx.commitlog.native as native
from rocketidx.build.in_process import build_index, build_index_range
from rocketidx.cli import main
from rocketidx.cli.build import reader_warning
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.commitlog.native import readers_of
from rocketidx.config import BuildConfig


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    where = tmp_path_factory.mktemp("reader") / "store"
    generate_store(where, GenConfig(messages=3000, segment_bytes=128 * 1024, body_bytes=40, seed=5))
    return where


def test_readers_of_names_one_reader_or_mixed():
    assert readers_of(["kernel", "kernel", ""]) == "kernel"
    assert readers_of(["numpy"]) == "numpy"
    assert readers_of(["kernel", "numpy", "kernel"]) == "mixed"
    assert readers_of(["", ""]) is None


@pytest.mark.skipif(not native.native_available(), reason="rocketidx._native is not built")
@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "numpy"])
def test_both_in_process_builds_say_which_reader_ran(store, tmp_path, monkeypatch, kernel):
    if not kernel:
        monkeypatch.setattr(native, "kernel", None)  # as where the extension is not built
    want = "kernel" if kernel else "numpy"
    _, whole = build_index(store, tmp_path / "whole", BuildConfig(timezone="UTC"))
    _, ranged = build_index_range(store, tmp_path / "range", BuildConfig(timezone="UTC"), from_offset=0)
    assert whole.reader == ranged.reader == want


@pytest.mark.skipif(not native.native_available(), reason="rocketidx._native is not built")
def test_the_summary_warns_only_when_the_numpy_reader_ran(store, tmp_path, monkeypatch, capsys):
    args = ["build", "--commitlog", str(store), "--in-process", "--timezone", "UTC"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    assert "numpy reader" not in capsys.readouterr().out
    assert main(args + ["--out", str(tmp_path / "b"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reader"] == "kernel"
    monkeypatch.setattr(native, "kernel", None)
    assert main(args + ["--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert out.count("numpy reader") == 1
    [line] = [line for line in out.splitlines() if "numpy reader" in line]
    assert line.startswith("warning: this process") and "pip install" in line


def test_on_spark_the_warning_says_ship_the_archive():
    for reader, who in (("numpy", "every task"), ("mixed", "some tasks")):
        line = reader_warning(reader, on_spark=True)
        assert line.startswith(f"warning: {who}") and "numpy reader" in line and "--archives" in line
    assert reader_warning("kernel", on_spark=True) is None and reader_warning(None, on_spark=False) is None
