"""``rocketidx stats`` (rocketidx.cli.stats): exit codes, JSON for scripts, tables for terminals."""
from __future__ import annotations

import argparse
import json

import pandas as pd
import pytest

from rocketidx.cli import stats as stats_cli


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="rocketidx")
    stats_cli.add_parser(p.add_subparsers(dest="command"))
    return stats_cli.cmd_stats(p.parse_args(argv))


def test_a_missing_index_exits_2_before_spark_starts(tmp_path, capsys):
    assert run(["stats", "--index", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "StoreLayoutError" in err and str(tmp_path / "nope") in err


def test_bad_targets_exit_2(tmp_path, capsys):
    assert run(["stats", "--index", str(tmp_path), "--target-chain", "0.5"]) == 2
    assert "target_mean_chain" in capsys.readouterr().err


def test_an_empty_build_output_is_an_empty_index_not_an_error(tmp_path, capsys):
    """A log whose first TOTALSIZE is 0 builds an output of no IndexFile: verify says clean, query
    answers [], and stats reports an index with nothing in it (it used to exit 2)."""
    from rocketidx.build.in_process import build_index
    from rocketidx.config import BuildConfig
    log = tmp_path / "commitlog"
    log.mkdir()
    (log / f"{0:020d}").write_bytes(bytes(64 * 1024))
    build_index(log, tmp_path / "out", BuildConfig(hash_slot_num=101, index_num=400, timezone="UTC"))
    assert run(["stats", "--index", str(tmp_path / "out"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert (summary["files"], summary["entries"], summary["hash_slot_num"]) == (0, 0, 101)
    assert run(["stats", "--index", str(tmp_path / "out")]) == 0
    assert "empty build output" in capsys.readouterr().out
    (tmp_path / "bare").mkdir()
    assert run(["stats", "--index", str(tmp_path / "bare")]) == 2  # a directory of nothing is still an error
    assert "no IndexFiles found" in capsys.readouterr().err


def test_format_table_aligns_and_formats():
    text = stats_cli.format_table([{"name": "a", "n": 1234, "r": 0.5, "t": 0}, {"name": "bb", "n": None, "r": 1.0, "t": None}],
                                  [("name", "name", "s"), ("n", "count", "i"), ("r", "fill", "%"), ("t", "time", "t")])
    assert text.splitlines() == ["name  count    fill                 time",
                                 "a     1,234   50.0%  1970-01-01 00:00:00",
                                 "bb        -  100.0%                    -"]


def test_bucket_shows_the_traffic_per_bucket_in_the_text_as_in_json(small_store, capsys):
    """Issue 31 item 9: ``--bucket 1h`` printed the same text as without it; the table was in --json only.
    The text table has --json's rows; without --bucket the ~96 default rows stay out of the text."""
    _, out = small_store
    assert run(["stats", "--index", str(out), "--in-process", "--bucket", "1h", "--json"]) == 0
    buckets = json.loads(capsys.readouterr().out)["buckets"]
    assert run(["stats", "--index", str(out), "--in-process", "--bucket", "1h"]) == 0
    text = capsys.readouterr().out
    assert "Traffic per 1h bucket" in text
    table = text.split("Traffic per 1h bucket")[1].split("\n\n")[0].splitlines()[2:]
    assert len(buckets) >= 2 and len(table) == len(buckets)
    for row, b in zip(table, buckets):
        assert row.split()[2:4] == [f"{b['entries']:,}", f"{b['messages']:,}"], row
    assert run(["stats", "--index", str(out), "--in-process"]) == 0
    assert "Traffic per" not in capsys.readouterr().out


@pytest.mark.spark
def test_json_and_tables(spark, small_store, capsys):
    _, out = small_store
    assert run(["stats", "--index", str(out), "--json", "--top", "3", "--bucket", "10m"]) == 0
    doc = json.loads(capsys.readouterr().out)
    manifest = json.loads((out / "_manifest.json").read_text())
    s = doc["summary"]
    assert (s["files"], s["entries"], s["bucket_ms"]) == (len(manifest["files"]), manifest["entries"], 600_000)
    assert s["messages"] == manifest["messages_indexed"]
    assert set(doc) == {"summary", "files", "chains", "longest_chains", "slot_bins", "buckets", "collisions",
                        "hot_keys", "sizing", "engine"}  # the CommitLog tables come with --commitlog (see test_spark_stats)
    assert len(doc["hot_keys"]) == 3 and len(doc["longest_chains"]) == 3
    assert sum(r["entries"] for r in doc["files"]) == manifest["entries"]
    tables = {k: pd.DataFrame(v) for k, v in doc.items() if k not in ("summary", "engine")}
    stats_cli.print_stats(s, tables)
    text = capsys.readouterr().out
    for heading in ("Files:", "Chain lengths", "Longest chains:", "Entries per key hash:", "Hot keys:", "Sizing:"):
        assert heading in text
    assert f"{manifest['entries']:,} entries" in text
