"""The in-process statistics (rocketidx.stats.in_process) against the Spark ones: the same tables, the same
summary, for a golden case with true collisions read with its CommitLog and a windowed build output whose
files roll over; and ``rocketidx stats`` picks its engine by size like every other command."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from stats_reference import golden_case

from rocketidx.cli import main as run
from rocketidx.stats.in_process import index_stats_local

G2 = "g2-unicode-collisions-v2-ipv6"


def _norm(v):
    """One spelling per value: lists for arrays, None for NaN, Python numbers for numpy ones."""
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def _same(local: pd.DataFrame, spark: pd.DataFrame, name: str) -> None:
    """Equal values row by row, whatever the integer widths and the index each engine hands back."""
    a, b = local.reset_index(drop=True), spark.reset_index(drop=True)
    assert list(a.columns) == list(b.columns), name
    assert len(a) == len(b), name
    for col in a.columns:
        assert [_norm(v) for v in a[col].tolist()] == [_norm(v) for v in b[col].tolist()], f"{name}.{col}"


@pytest.mark.spark
@pytest.mark.parametrize("which", ["g2", "windowed"])
def test_in_process_statistics_equal_the_spark_ones(spark, small_store, which):
    from rocketidx.spark.stats import index_stats
    if which == "g2":
        case = golden_case(G2)
        args = (case.index_dir, case.commitlog)
        kw = dict(hash_slot_num=case.hash_slot_num, index_num=case.index_num, bucket_ms=600_000, top=5)
    else:
        store, out = small_store
        args, kw = (out, store), dict(top=3)
    on_spark = index_stats(spark, *args, **kw)
    local = index_stats_local(*args, **kw)
    try:
        assert local.names() == on_spark.names()
        want, got = on_spark.to_pandas(), local.to_pandas()
        for name in want:
            _same(got[name], want[name], name)
        assert local.summary() == on_spark.summary()
    finally:
        on_spark.unpersist()


def test_stats_picks_the_engine_by_size_and_says_so(small_store, capsys):
    store, out = small_store
    assert run(["stats", "--index", str(out), "--commitlog", str(store), "--json", "--top", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"]["name"] == "in-process" and "below the break-even" in doc["engine"]["reason"]
    assert doc["summary"]["distinct_keys"] > 0 and len(doc["true_collisions"]) >= 0
    assert run(["stats", "--index", str(out), "--in-process", "--top", "3"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("engine: in-process (--in-process)")
    assert run(["stats", "--index", str(out), "--in-process", "--master", "local[1]"]) == 2
    assert "exclude each other" in capsys.readouterr().err
