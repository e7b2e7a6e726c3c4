"""The entry and window stages of the Spark build, against the core's own entries.

Entry stage: ``output=entries`` rows (and the build's ``output=shuffle`` bundles, unpacked) equal
what ``rocketidx.commitlog.entries`` extracts from the core reader's messages, windows from ``assign_windows``.
Window stage: every window lands in exactly one partition, each partition holds every split's info row
first, then its bundles in ``(window, phy_offset)`` order.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from refdata import GOLDEN

from rocketidx.commitlog.entries import extract_entries
from rocketidx.index.bundles import iter_bundles
from rocketidx.index.windows import assign_windows
from rocketidx.spark.build import entries_frame, partition_entries, partition_keys
from rocketidx.spark.sources.commitlog import SOURCE_NAME, SourceOptions

from splitread import core_read

pytestmark = pytest.mark.spark

G2 = GOLDEN / "g2-unicode-collisions-v2-ipv6"
G6 = GOLDEN / "g6-gaps-backwards-odd-window"
WINDOW_MS = {G2: 600_000, G6: 433_000}


def core_entries(case) -> pa.Table:
    table, _ = core_read(case / "commitlog")
    e = pa.Table.from_batches([extract_entries(b) for b in table.to_batches()])
    window = assign_windows(e["store_timestamp_ms"].to_numpy(), WINDOW_MS[case])
    return e.add_column(0, "window", pa.array(window))


@pytest.mark.parametrize("case", [G2, G6], ids=["g2", "g6"])
def test_entry_rows_equal_the_core_entries(spark, case):
    df = (spark.read.format(SOURCE_NAME).option("output", "entries").option("window", WINDOW_MS[case])
          .option("split_bytes", "100003").load(str(case)))
    assert_df_equality(df, spark.createDataFrame(core_entries(case)), ignore_row_order=True)


def test_shuffle_bundles_unpack_to_the_core_entries(spark):
    opts = SourceOptions(path=str(G6), split_bytes=100_003, window_ms=WINDOW_MS[G6], stop_replicas=3)
    t = entries_frame(spark, opts).toArrow()
    info = t.filter(pc_is_null(t["window"]))
    copies: dict[bytes, list[int]] = {}
    for raw, copy in zip(info["info"].to_pylist(), info["phy_offset"].to_pylist()):
        copies.setdefault(raw, []).append(copy)
    assert copies and all(sorted(c) == [0, 1, 2] for c in copies.values()), "each split's info, once per copy"
    rows = []
    for batch in t.to_batches():
        for b in iter_bundles(batch):
            phy, kh, ts = b.entries()
            assert len(set(assign_windows(ts, WINDOW_MS[G6]).tolist())) == 1, "a bundle is one window"
            seq = np.concatenate([np.arange(c) for c in b.entry_counts])
            rows += [{"window": b.window, "phy_offset": int(p), "entry_seq": int(s), "key_hash": int(h),
                      "store_timestamp_ms": int(x)} for p, s, h, x in zip(phy, seq, kh, ts)]
    want = core_entries(G6)
    key = lambda r: (r["phy_offset"], r["entry_seq"])  # noqa: E731
    assert sorted(rows, key=key) == sorted(want.select(list(rows[0])).to_pylist(), key=key)


def pc_is_null(a):
    import pyarrow.compute as pc
    return pc.is_null(a)


def pc_is_valid(a):
    import pyarrow.compute as pc
    return pc.is_valid(a)


@pytest.mark.parametrize("n", [1, 3])
def test_each_window_lives_in_one_partition_sorted_with_the_info_rows_first(spark, n):
    opts = SourceOptions(path=str(G6), split_bytes=100_003, window_ms=WINDOW_MS[G6], stop_replicas=n)
    splits = entries_frame(spark, opts).where("window IS NULL").count() // n
    df = partition_entries(entries_frame(spark, opts), n).withColumn("part", F.spark_partition_id())
    rows = df.withColumn("pos", F.monotonically_increasing_id()).select(
        "part", "pos", "window", "phy_offset").toArrow().sort_by([("part", "ascending"), ("pos", "ascending")])
    part = rows["part"].to_numpy()
    window = rows["window"].to_pylist()
    phy = rows["phy_offset"].to_pylist()
    windows_per_part: dict[int, set] = {}
    for p in range(n):
        sel = np.flatnonzero(part == p)
        w = [window[i] for i in sel]
        infos = sum(1 for x in w if x is None)
        assert infos == splits, "every partition gets one copy of every split's info"
        assert all(x is None for x in w[:infos]), "info rows come first"
        keyed = [(w[i], phy[sel[i]]) for i in range(infos, len(sel))]
        assert keyed == sorted(keyed), "sorted by (window, phy_offset)"
        windows_per_part[p] = {x for x in w[infos:]}
    seen = [w for ws in windows_per_part.values() for w in ws]
    assert len(seen) == len(set(seen)), "a window is in exactly one partition"
    if n > 1:
        assert sum(1 for ws in windows_per_part.values() if ws) == n, "windows are spread over all partitions"


def test_partition_keys_land_where_spark_hash_partitioning_puts_them(spark):
    for n in (2, 7):
        keys = partition_keys(n)
        got = (spark.createDataFrame([(k,) for k in keys], "k long").repartition(n, "k")
               .select("k", F.spark_partition_id().alias("p")).collect())
        assert {r.k: r.p for r in got} == {k: p for p, k in enumerate(keys)}
