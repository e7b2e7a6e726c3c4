"""One rule picks the engine: flags first (spark-submit always means Spark), then what only one engine
can do, then the size against the break-even; the in-process build takes every option the Spark build
does (offset and time ranges run as the direct plan's one task)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from refdata import GOLDEN_CASES
from splitread import core_read

from rocketidx import cli
from rocketidx.build.engine import DEFAULT_BREAK_EVEN, IN_PROCESS, SPARK, choose_engine, data_bytes
from rocketidx.build.in_process import build_index_range
from rocketidx.commitlog.entries import extract_entries
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import BuildConfig
from rocketidx.errors import ConfigError
from rocketidx.index.reader import IndexFile
from rocketidx.spark.session import load_spark_settings


@pytest.fixture(autouse=True)
def not_under_spark_submit(monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)


def test_flags_decide_first_then_size():
    assert choose_engine(10, master="local[2]").name == SPARK
    assert choose_engine(10**15, in_process=True).name == IN_PROCESS
    assert choose_engine(99, break_even=100).name == IN_PROCESS
    assert choose_engine(100, break_even=100).name == SPARK
    assert "break-even" in choose_engine(100, break_even=100).reason
    assert choose_engine(1, spark_only="the output is a URI").reason == "the output is a URI"
    with pytest.raises(ConfigError, match="exclude"):
        choose_engine(1, in_process=True, master="local[2]")
    with pytest.raises(ConfigError, match="URI"):
        choose_engine(1, in_process=True, spark_only="the output is a URI")


def test_spark_submit_always_means_spark(monkeypatch):
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    assert choose_engine(1).name == SPARK
    with pytest.raises(ConfigError):
        choose_engine(1, in_process=True)


def test_the_break_even_is_a_documented_default_in_conf():
    settings = load_spark_settings(Path(__file__).resolve().parents[3] / "conf" / "spark.json")
    assert settings.break_even == DEFAULT_BREAK_EVEN == int(8.5 * 1024**3)  # what make bench measured


def test_data_bytes_counts_allocated_blocks_in_the_range(tmp_path):
    segments = list_segments(GOLDEN_CASES[0] / "commitlog")
    whole = data_bytes(segments)
    assert 0 < whole <= sum(s.size for s in segments)
    assert data_bytes(segments, from_offset=segments[1].base_offset) < whole


def test_a_build_runs_in_process_and_says_why(capsys, tmp_path):
    rc = cli.main(["build", "--commitlog", str(GOLDEN_CASES[0] / "commitlog"), "--out", str(tmp_path / "o"),
                   "--hash-slots", "97", "--index-num", "400", "--timezone", "UTC", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["engine"]["name"] == IN_PROCESS and "1 worker(s)" in out["engine"]["reason"]
    assert "does not beat them at any size" in out["engine"]["reason"] and out["spark"] is None


def test_workers_make_the_size_pick_no_engine_but_flags_still_decide():
    assert choose_engine(10**15, workers=2).name == IN_PROCESS  # far past the break-even
    assert choose_engine(10**15, break_even=100).name == SPARK  # one process: the size decides
    assert choose_engine(1, workers=2, master="local[2]").name == SPARK
    assert choose_engine(1, workers=2, spark_only="too large to stage").reason == "too large to stage"


def test_a_uri_output_past_local_scratch_space_goes_to_spark(monkeypatch):
    import shutil
    from rocketidx.ops import build as ops_build
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 9, 1))
    assert "stages in" in ops_build._staging_past_disk("s3://b/out", 2)
    assert ops_build._staging_past_disk("s3://b/out", 1) is None
    assert ops_build._staging_past_disk("/local/out", 10**15) is None


def test_the_in_process_build_of_a_range_indexes_exactly_the_messages_in_it(tmp_path):
    case = GOLDEN_CASES[0]
    table, _ = core_read(case / "commitlog")
    ts = sorted(table["store_timestamp_ms"].to_pylist())
    t_lo, t_hi, lo = ts[300], ts[1800], 200_000
    manifest, summary = build_index_range(case, tmp_path / "out", BuildConfig(97, 400, 0, "UTC"), from_offset=lo,
                                          from_time_ms=t_lo, to_time_ms=t_hi)
    assert manifest["filters"] == {"from_offset": lo, "from_time_ms": t_lo, "to_time_ms": t_hi}
    items = []
    for f in manifest["files"]:
        idx = IndexFile(tmp_path / "out" / "index" / f["name"], 97, 400)
        items += idx.items["phy_offset"][1:idx.header.index_count].tolist()
    entries = [e for b in table.to_batches() for e in extract_entries(b).to_pylist()]
    assert sorted(items) == sorted(e["phy_offset"] for e in entries
                                   if e["phy_offset"] >= lo and t_lo <= e["store_timestamp_ms"] < t_hi)
    assert summary.messages == sum(1 for r in table.to_pylist() if r["phy_offset"] >= lo
                                   and t_lo <= r["store_timestamp_ms"] < t_hi)


def test_the_cli_builds_a_range_in_process(capsys, tmp_path):
    rc = cli.main(["build", "--commitlog", str(GOLDEN_CASES[0] / "commitlog"), "--out", str(tmp_path / "o"),
                   "--hash-slots", "97", "--index-num", "400", "--timezone", "UTC", "--in-process",
                   "--from-offset", "100000", "--to-offset", "600000", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["engine"]["name"] == IN_PROCESS and out["messages"] > 0
    manifest = json.loads((tmp_path / "o" / "_manifest.json").read_text())
    assert manifest["filters"] == {"from_offset": 100000, "to_offset": 600000}
