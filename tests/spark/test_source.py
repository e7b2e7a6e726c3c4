"""The ``rocketmq-commitlog`` source through Spark: schema, rows equal the core reader's, filters, stops.

Expectations come from the core's sequential reader (:class:`CommitLogReader`) on the same bytes, never
from the source under test.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from chispa import assert_df_equality

from refdata import GOLDEN, GOLDEN_CASES

from rocketidx.commitlog.columns import MESSAGE_SCHEMA
from rocketidx.spark.sources.commitlog import SOURCE_NAME, STOP_ROWS, read_messages, spark_schema

from splitread import core_read

pytestmark = pytest.mark.spark

G1 = GOLDEN / "g1-basic-hourly"
G5 = GOLDEN / "g5-corrupt-crc-last-segment"


def core_df(spark, table: pa.Table):
    return spark.createDataFrame(table)


def test_schema_is_the_core_message_schema(spark):
    df = spark.read.format(SOURCE_NAME).load(str(G1))
    assert df.schema == spark_schema("messages")
    assert [f.name for f in df.schema] == MESSAGE_SCHEMA.names
    assert spark.read.format(SOURCE_NAME).option("output", "stops").load(str(G1)).schema.names == STOP_ROWS.names


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=[c.name for c in GOLDEN_CASES])
def test_read_messages_equals_the_core_reader_with_every_segment_split(spark, case):
    table, reader = core_read(case / "commitlog")
    # Uneven splits of every segment (256 KiB to 1 MiB): boundaries fall inside records.
    got = read_messages(spark, str(case), split_bytes=100_003)
    assert_df_equality(got.df, core_df(spark, table), ignore_row_order=True)
    assert got.resolved.stop == reader.stop.as_dict()
    assert list(got.resolved.stops) == [s.as_dict() for s in reader.stops]


@pytest.mark.parametrize("split", ["40000", "1m"])
def test_any_split_size_gives_the_same_rows(spark, split):
    """Smaller splits, down to a few bytes, are covered without a JVM in test_split_stops."""
    table, _ = core_read(G5 / "commitlog")
    got = read_messages(spark, str(G5), split_bytes=split)
    assert_df_equality(got.df, core_df(spark, table), ignore_row_order=True)


def test_plain_source_on_a_clean_log_equals_the_core_reader(spark):
    """Without a final stop before the data ends, split-wise reading alone is already exact."""
    table, _ = core_read(G1 / "commitlog")
    df = spark.read.format(SOURCE_NAME).option("split_bytes", "100000").load(str(G1))
    assert_df_equality(df, core_df(spark, table), ignore_row_order=True)


def test_offset_and_time_filters(spark):
    table, _ = core_read(G1 / "commitlog")
    lo, hi = 300_000, 700_001
    df = read_messages(spark, str(G1), split_bytes=65536, from_offset=lo, to_offset=hi).df
    want = table.filter(pc.and_(pc.greater_equal(table["phy_offset"], lo), pc.less(table["phy_offset"], hi)))
    assert_df_equality(df, core_df(spark, want), ignore_row_order=True)
    ts = sorted(table["store_timestamp_ms"].to_pylist())
    t_lo, t_hi = ts[500], ts[1500]
    df = (spark.read.format(SOURCE_NAME).option("from_time", t_lo).option("to_time", t_hi)
          .option("split_bytes", "65536").load(str(G1)))
    want = table.filter(pc.and_(pc.greater_equal(table["store_timestamp_ms"], t_lo),
                                pc.less(table["store_timestamp_ms"], t_hi)))
    assert_df_equality(df, core_df(spark, want), ignore_row_order=True)


def test_stops_output_reports_the_invalid_record(spark):
    _, reader = core_read(G5 / "commitlog")
    rows = (spark.read.format(SOURCE_NAME).option("output", "stops").option("split_bytes", "65536")
            .load(str(G5)).where("kind = 'corrupt'").collect())
    assert [(r.segment, r.segment_offset, r.reason) for r in rows] == \
        [(reader.stop.as_dict()["segment"], reader.stop.segment_offset, reader.stop.reason)]


def test_messages_can_be_queried_with_sql(spark):
    table, _ = core_read(G1 / "commitlog")
    read_messages(spark, str(G1)).df.createOrReplaceTempView("commitlog_g1")
    got = spark.sql("SELECT topic, count(*) AS n FROM commitlog_g1 GROUP BY topic").collect()
    want = table.group_by("topic").aggregate([("topic", "count")]).to_pylist()
    assert {r.topic: r.n for r in got} == {w["topic"]: w["topic_count"] for w in want}


def test_a_bad_option_fails_with_the_option_named(spark):
    with pytest.raises(Exception, match="split_bytes"):
        spark.read.format(SOURCE_NAME).option("split_bytes", "lots").load(str(G1)).count()
