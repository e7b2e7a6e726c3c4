"""Index statistics on Spark: IndexFiles (+ CommitLog) -> named DataFrames, small ones as pandas.

In: an index directory (a build output or a broker's ``store/index``), optionally the CommitLog it
indexes, and a SparkSession. Out: :class:`IndexStats`, whose DataFrames are

=================  ===============================================================================
``files``          one row per file: window, header, fill ratio, used slots, load factor, chain
                   summary (mean, mean walk, p50/p90/p99/max), distinct key hashes, disk vs apparent
``chains``         per file and chain length: how many slots have a chain that long
``longest_chains`` the longest chains over all files, with their slot and chain head
``slot_bins``      per file and slot-table bin: used slots and entries (is the hash spread even?)
``buckets``        per time bucket: entries, messages, keys per message (item times, 1 s resolution)
``collisions``     per entries-per-key-hash: how many key hashes hold that many entries
``hot_keys``       the key hashes with most entries (with their keys when the CommitLog is given)
``sizing``         as built / advised / broker default hashSlotNum and indexNum, with predictions
``topics``         (CommitLog) per topic: messages, indexed messages, entries, keys per message
``topic_buckets``  (CommitLog) the same per topic and time bucket (exact store times)
``true_collisions``(CommitLog) key hashes shared by two or more distinct keys
=================  ===============================================================================

and :meth:`IndexStats.summary` (one dict) and :meth:`IndexStats.to_pandas`.

The plan::

    rocketmq-index source, output=scan       one task per file: rocketidx.stats.core.scan_file streams the
                                             slot table and items through the core's dtypes and returns
                                             one row (scalars + small nested tables + per-hash-partition
                                             partial key counts as int32 blobs)       -> cached
      -> explode(key_parts), groupBy(part).applyInArrow(merge)   exact per-hash counts, one row per
                                             hash partition (histogram, top hashes, a filter of the
                                             hashes held twice or more)                -> cached
    with a CommitLog:
    spark.range(ranges) -> mapInArrow        per 128 MiB byte range of the indexed offsets, read by the
                                             core's RangeReader: (topic, bucket) counts and the keys of
                                             entries whose hash passed the filter, as Arrow IPC blobs by part
      -> groupBy(part).applyInArrow(merge)   distinct keys per hash -> true collisions, hot key names

Stays true: no task holds more than one file's slot counts and key hashes or one hash partition's
counts; only the small results (one row per file, per hash partition, per bucket) reach the driver, plus
the filters (16 MiB each, one per hash partition); partial counts cross the shuffle as numpy blobs
rather than one row per key, because a row per key costs the JVM microseconds and an index holds tens of
millions of keys. A key hash held once in the index cannot hide a collision, so only the entries of
hashes held twice or more (plus the filter's ~1% false positives) leave the CommitLog tasks.
"""
from __future__ import annotations

import io
import math
import os
from functools import cached_property, partial
from typing import Iterator

import numpy as np
import pyarrow as pa

from rocketidx.stats import core
from rocketidx.stats.sizing import SizingTargets
from rocketidx.stats.keys import (DEFAULT_FILTER_BITS, DEFAULT_TOP, KEY_ROWS, TOPIC_BUCKET_ROWS, commitlog_partials, hash_filter, hash_partition, merge_key_counts, merge_key_groups)
from rocketidx.errors import ConfigError, StoreLayoutError
from rocketidx.output.manifest import Manifest
from rocketidx.spark.tasks import grouped, spark_schema, task_setup, typed_task_errors
from rocketidx.stats.in_process import StatsResults, commitlog_ranges
import rocketidx.storage as storage
from rocketidx.spark.sources.index import (DEFAULT_TASK_ENTRIES, FILE_COLUMNS, INDEX_SOURCE_NAME, IndexDataSource, IndexSourceOptions, index_span_ms, read_index_items, register_index_source)


DEFAULT_PART_ENTRIES = 16 << 20  # hash partitions: at most ~16 M key hashes per merge task
KEY_MERGE_ROWS = pa.schema([
    ("part", pa.int32()), ("distinct_hashes", pa.int64()), ("entries", pa.int64()),
    ("multiplicity", pa.list_(pa.struct([("entries_per_hash", pa.int64()), ("key_hashes", pa.int64())]))),
    ("top", pa.list_(pa.struct([("key_hash", pa.int32()), ("entries", pa.int64()), ("files", pa.int64())]))),
    ("filter", pa.binary()),
])
COMMITLOG_ROWS = pa.schema([
    ("topic_buckets", pa.list_(pa.struct(list(TOPIC_BUCKET_ROWS)))),
    ("key_parts", pa.list_(pa.struct([("part", pa.int32()), ("keys", pa.binary())]))),
])
_GROUP = pa.struct([("key_hash", pa.int32()), ("distinct_keys", pa.int64()), ("entries", pa.int64()),
                    ("keys", pa.list_(pa.string())), ("key_entries", pa.list_(pa.int64()))])
GROUP_MERGE_ROWS = pa.schema([
    ("part", pa.int32()), ("hashes", pa.int64()), ("keys", pa.int64()), ("entries", pa.int64()),
    ("colliding_hashes", pa.int64()), ("colliding_keys", pa.int64()), ("colliding_entries", pa.int64()),
    ("groups", pa.list_(_GROUP)),
])
DEFAULT_SPLIT_BYTES = 128 << 20  # CommitLog bytes per task: ~190,000 messages of the sample's shape


def merge_key_partition(table: pa.Table, *, top: int, filter_bits: int) -> pa.Table:
    """``applyInArrow``: one hash partition's per-file blobs -> its :data:`KEY_MERGE_ROWS` row."""
    task_setup()
    part = table["part"][0].as_py() if table.num_rows else 0
    k = merge_key_counts(table["hashes"].to_pylist(), table["counts"].to_pylist(), top)
    flt = hash_filter(np.concatenate([k.repeated, np.array([t["key_hash"] for t in k.top], np.int32)]),
                           filter_bits)
    return pa.Table.from_pydict({
        "part": [part], "distinct_hashes": [k.distinct_hashes], "entries": [k.entries],
        "multiplicity": [[{"entries_per_hash": int(a), "key_hashes": int(b)} for a, b in
                          zip(k.multiplicity["entries_per_hash"].tolist(), k.multiplicity["key_hashes"].tolist())]],
        "top": [k.top], "filter": [flt.tobytes()]}, schema=KEY_MERGE_ROWS)


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _from_ipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(blob).read_all()


def commitlog_task(batches: Iterator[pa.RecordBatch], *, ranges: list, bucket_ms: int, key_filter: bytes,
                   parts: int, phy_range: tuple[int, int], check_crc: bool) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over range numbers: each CommitLog byte range read by the core's
    :class:`rocketidx.commitlog.readers.RangeReader`, reduced to one :data:`COMMITLOG_ROWS` row (nothing per message
    leaves the task)."""
    task_setup()
    from rocketidx.commitlog.segments import open_segment
    from rocketidx.commitlog.readers import RangeReader
    flt = np.frombuffer(key_filter, np.uint8)
    for ids in batches:
        for i in ids.column("id").to_pylist():
            rng = ranges[i]
            buf = open_segment(rng.segment)
            tbs, kts = [], []
            try:
                for batch in RangeReader(buf, rng, check_crc=check_crc):
                    tb, kt = commitlog_partials(batch, bucket_ms=bucket_ms, key_filter=flt,
                                                     phy_range=phy_range)
                    tbs.append(tb)
                    kts.append(kt)
            finally:
                if hasattr(buf, "close"):
                    buf.close()
            yield _commitlog_row(tbs, kts, parts)


def _commitlog_row(tbs: list[pa.Table], kts: list[pa.Table], parts: int) -> pa.RecordBatch:
    tb = (pa.concat_tables(tbs) if tbs else TOPIC_BUCKET_ROWS.empty_table()).group_by(
        ["topic", "bucket_start_ms"]).aggregate([("messages", "sum"), ("indexed_messages", "sum"), ("entries", "sum")])
    tb = pa.table([tb["topic"], tb["bucket_start_ms"], tb["messages_sum"], tb["indexed_messages_sum"],
                   tb["entries_sum"]], schema=TOPIC_BUCKET_ROWS)
    kt = (pa.concat_tables(kts) if kts else KEY_ROWS.empty_table()).group_by(["key_hash", "key"]).aggregate(
        [("entries", "sum")])
    kt = pa.table([kt["key_hash"], kt["key"], kt["entries_sum"]], schema=KEY_ROWS)
    owner = hash_partition(kt["key_hash"].to_numpy(), parts)
    key_parts = [{"part": p, "keys": _ipc(kt.filter(pa.array(owner == p)))} for p in np.unique(owner).tolist()]
    return pa.RecordBatch.from_pydict({"topic_buckets": [tb.to_pylist()], "key_parts": [key_parts]},
                                      schema=COMMITLOG_ROWS)


def merge_group_partition(table: pa.Table, *, wanted: frozenset, examples: int) -> pa.Table:
    """``applyInArrow``: one hash partition's key blobs -> its :data:`GROUP_MERGE_ROWS` row."""
    task_setup()
    part = table["part"][0].as_py() if table.num_rows else 0
    totals, groups = merge_key_groups([_from_ipc(b) for b in table["keys"].to_pylist()], set(wanted), examples)
    return pa.Table.from_pydict({"part": [part], **{k: [v] for k, v in totals.items()}, "groups": [groups]},
                                schema=GROUP_MERGE_ROWS)


def _small(df):
    """One partition for a result known to be small: a following groupBy or sort then needs no shuffle
    and no sampling job, whatever ``spark.sql.shuffle.partitions`` says (each job costs a second)."""
    return df.coalesce(1)


class IndexStats(StatsResults):
    """Statistics of one index (see the module docstring). Build it with :func:`index_stats`.

    The file scan and the key merge run (and are cached) when the object is made, so a bad file fails
    here with a typed error naming it; CommitLog statistics run on first use. :meth:`unpersist` frees
    the cached results.
    """

    def __init__(self, spark, index_dir: str, commitlog: str | None, opts: IndexSourceOptions,
                 targets: SizingTargets, manifest: Manifest | None, filter_bits: int, check_crc: bool,
                 split_bytes: int = DEFAULT_SPLIT_BYTES):
        from pyspark.sql import functions as F
        self.spark, self.index_dir, self.commitlog = spark, index_dir, commitlog
        self.opts, self.targets, self.manifest = opts, targets, manifest
        self.filter_bits, self.check_crc, self.split_bytes = filter_bits, check_crc, split_bytes
        self.bucket_ms = opts.bucket_ms
        register_index_source(spark)
        self._scan = spark.read.format(INDEX_SOURCE_NAME).options(**opts.as_options()).load().cache()
        self._cached = [self._scan]
        with typed_task_errors():
            self._scan.count()
        keys = self._scan.select(F.explode("key_parts").alias("k")).select("k.*")
        # Partitioned by "part" already, so the groupBy adds no exchange of spark.sql.shuffle.partitions.
        self._keys = (keys.repartition(opts.key_parts, "part").groupBy("part")
                      .applyInArrow(grouped(merge_key_partition, top=opts.top, filter_bits=filter_bits),
                                    spark_schema(KEY_MERGE_ROWS))
                      .cache())
        self._cached.append(self._keys)
        self._keys.select("part", "distinct_hashes").collect()  # materialise without the filters
        # The per-file key blobs (8 B per distinct hash of each file) are merged now: keep the rest only.
        slim = self._scan.drop("key_parts").cache()
        slim.count()
        self._scan.unpersist()
        self._scan = slim
        self._cached[0] = slim

    # -- index-only DataFrames --------------------------------------------------------------------

    @cached_property
    def files(self):
        return _small(self._scan.select(*[name for name, _ in FILE_COLUMNS])).sortWithinPartitions("file")

    @cached_property
    def chains(self):
        from pyspark.sql import functions as F
        return (_small(self._scan.select("file", "name", F.explode("chains").alias("c")))
                .select("file", "name", "c.chain_length", "c.slots").sortWithinPartitions("file", "chain_length"))

    @cached_property
    def longest_chains(self):
        from pyspark.sql import functions as F
        return (self._scan.select("file", "name", F.explode("longest").alias("c"))
                .select("file", "name", "c.slot", "c.length", "c.distinct_hashes", "c.head_item")
                .orderBy(F.desc("length"), "file", "slot").limit(self.opts.top))

    @cached_property
    def slot_bins(self):
        from pyspark.sql import functions as F
        return (_small(self._scan.select("file", "name", F.explode("bins").alias("b")))
                .select("file", "name", "b.bin", "b.first_slot", "b.slots", "b.used_slots", "b.entries")
                .sortWithinPartitions("file", "bin"))

    @cached_property
    def buckets(self):
        from pyspark.sql import functions as F
        return (_small(self._scan.select(F.explode("buckets").alias("b")).select("b.*"))
                .groupBy("bucket_start_ms")
                .agg(F.sum("entries").alias("entries"), F.sum("messages").alias("messages"))
                .withColumn("keys_per_message", F.col("entries") / F.col("messages"))
                .sortWithinPartitions("bucket_start_ms"))

    @cached_property
    def collisions(self):
        from pyspark.sql import functions as F
        return (_small(self._keys.select(F.explode("multiplicity").alias("m")).select("m.*"))
                .groupBy("entries_per_hash").agg(F.sum("key_hashes").alias("key_hashes"))
                .withColumn("entries", F.col("entries_per_hash") * F.col("key_hashes"))
                .sortWithinPartitions("entries_per_hash"))

    @cached_property
    def _top_hashes(self):
        from pyspark.sql import functions as F
        return (self._keys.select(F.explode("top").alias("t")).select("t.*")
                .orderBy(F.desc("entries"), "key_hash").limit(self.opts.top))

    @cached_property
    def hot_keys(self):
        """Top key hashes by entries; with the CommitLog, their keys (``keys``: most entries first)."""
        from pyspark.sql import functions as F
        top = self._top_hashes
        if self.commitlog is None:
            return top
        g = self._groups.select("key_hash", "distinct_keys", "keys", "key_entries")
        return _small(top.join(F.broadcast(g), "key_hash", "left")).sortWithinPartitions(F.desc("entries"), "key_hash")

    @cached_property
    def sizing(self):
        rows = self.sizing_rows()
        return self.spark.createDataFrame(pa.Table.from_pylist(rows).to_pandas())

    # -- CommitLog DataFrames ---------------------------------------------------------------------

    def _need_commitlog(self, what: str) -> None:
        if self.commitlog is None:
            raise ConfigError("commitlog", None, f"{what} needs the CommitLog: index_stats(..., commitlog=DIR)")

    @cached_property
    def _commitlog_rows(self):
        """One row per CommitLog byte range of the indexed offsets. The ranges are read by the core in
        the tasks rather than through the ``rocketmq-commitlog`` DataFrame: every record in the range
        was indexed, so no recovery pass is needed, and the messages never cross into the JVM."""
        self._need_commitlog("CommitLog statistics")
        files = self.files.where("entries > 0").select("begin_phy_offset", "end_phy_offset").collect()
        lo = min((r["begin_phy_offset"] for r in files), default=0)
        hi = max((r["end_phy_offset"] for r in files), default=-1)
        ranges = commitlog_ranges(self.commitlog, lo, hi, self.split_bytes) if hi >= lo else []
        flt = np.zeros(1 << (self.filter_bits - 3), np.uint8)
        for row in self._keys.select("filter").toLocalIterator():  # one 16 MiB filter at a time
            flt |= np.frombuffer(row["filter"], np.uint8)
        fn = partial(commitlog_task, ranges=ranges, bucket_ms=self.bucket_ms, key_filter=flt.tobytes(),
                     parts=self.opts.key_parts, phy_range=(lo, hi), check_crc=self.check_crc)
        n = max(1, len(ranges))
        ids = self.spark.range(0, len(ranges), 1, n)  # one range per partition
        rows = ids.mapInArrow(fn, spark_schema(COMMITLOG_ROWS)).cache()
        self._cached.append(rows)
        with typed_task_errors():
            rows.count()
        return rows

    @cached_property
    def topic_buckets(self):
        from pyspark.sql import functions as F
        return (_small(self._commitlog_rows.select(F.explode("topic_buckets").alias("t")).select("t.*"))
                .groupBy("topic", "bucket_start_ms")
                .agg(*[F.sum(c).alias(c) for c in ("messages", "indexed_messages", "entries")])
                .withColumn("keys_per_message", F.col("entries") / F.col("messages"))
                .sortWithinPartitions("topic", "bucket_start_ms"))

    @cached_property
    def topics(self):
        from pyspark.sql import functions as F
        return (self.topic_buckets.groupBy("topic")
                .agg(*[F.sum(c).alias(c) for c in ("messages", "indexed_messages", "entries")])
                .withColumn("keys_per_message", F.col("entries") / F.col("messages"))
                .sortWithinPartitions(F.desc("entries"), "topic"))

    @cached_property
    def _group_rows(self):
        from pyspark.sql import functions as F
        wanted = frozenset(int(r["key_hash"]) for r in self._top_hashes.collect())
        keys = self._commitlog_rows.select(F.explode("key_parts").alias("k")).select("k.*")
        rows = (keys.repartition(self.opts.key_parts, "part").groupBy("part")
                .applyInArrow(grouped(merge_group_partition, wanted=wanted, examples=5),
                              spark_schema(GROUP_MERGE_ROWS))
                .cache())
        self._cached.append(rows)
        return rows

    @cached_property
    def _groups(self):
        from pyspark.sql import functions as F
        return self._group_rows.select(F.explode("groups").alias("g")).select("g.*")

    @cached_property
    def true_collisions(self):
        """Key hashes that two or more distinct keys share: the broker returns each one's offsets for
        the others' queries, and only a client that reads the messages can tell them apart."""
        from pyspark.sql import functions as F
        return _small(self._groups.where("distinct_keys >= 2")).sortWithinPartitions(
            F.desc("distinct_keys"), F.desc("entries"), "key_hash")

    # -- small results (sizing, summary, to_pandas: StatsResults) ---------------------------------

    def _group_totals(self):
        return self._group_rows.select(*[c for c in GROUP_MERGE_ROWS.names if c not in ("part", "groups")]).toPandas()

    def _pandas(self, name: str):
        """A named DataFrame as pandas, collected once (the results are cached, so they cannot change)."""
        memo = self.__dict__.setdefault("_pandas_memo", {})
        if name not in memo:
            with typed_task_errors():
                memo[name] = getattr(self, name).toPandas()
        return memo[name]

    def unpersist(self) -> None:
        for df in self._cached:
            df.unpersist()


def index_stats(spark, index_dir: str | os.PathLike, commitlog: str | os.PathLike | None = None, *,
                hash_slot_num: int | None = None, index_num: int | None = None, bucket_ms: int | None = None,
                top: int = DEFAULT_TOP, bins: int = core.DEFAULT_BINS,
                targets: SizingTargets = SizingTargets(), key_parts: int | None = None,
                filter_bits: int = DEFAULT_FILTER_BITS, check_crc: bool = True,
                split_bytes: int = DEFAULT_SPLIT_BYTES, check_log: bool = True) -> IndexStats:
    """Statistics of the index in ``index_dir`` (and of its keys in ``commitlog``), computed on ``spark``.

    ``bucket_ms``: time bucket (default: about 96 buckets over the index's span); ``top``: longest
    chains and hot keys kept; ``targets``: what the sizing advice aims for; ``key_parts``: hash
    partitions of the key merge (default: the session's parallelism, more past 16 M key hashes each).
    A ``commitlog`` the index was not built from raises :class:`rocketidx.errors.IndexLogMismatchError`
    before any Spark job (a sample of its entries: :mod:`rocketidx.query.logmatch`; ``check_log=False``: the
    caller has checked).
    """
    index_dir = str(index_dir)
    refs, manifest = core.file_refs(index_dir, hash_slot_num, index_num)
    if not refs:
        raise StoreLayoutError(storage.redact(index_dir), "no IndexFiles found")
    if commitlog is not None:
        from rocketidx.commitlog.segments import list_segments
        list_segments(commitlog)  # a typed error naming the path, before any Spark job
        if check_log:
            from rocketidx.query.logmatch import require_index_of_log
            require_index_of_log(index_dir, commitlog, hash_slot_num, index_num, check_crc=check_crc)
    begin, end = index_span_ms(refs)
    total = sum(core.read_header(r.path, r.hash_slot_num, r.index_num).index_count - 1 for r in refs)
    parallelism = spark.sparkContext.defaultParallelism
    opts = IndexSourceOptions(path=index_dir, output="scan", hash_slot_num=refs[0].hash_slot_num,
                              index_num=refs[0].index_num,
                              bucket_ms=bucket_ms or core.auto_bucket_ms(max(1, end - begin)), top=top, bins=bins,
                              key_parts=key_parts or max(parallelism, math.ceil(total / DEFAULT_PART_ENTRIES)),
                              # whole rounds of tasks: a last round with one task would leave cores idle
                              tasks=parallelism * math.ceil(total / DEFAULT_TASK_ENTRIES / parallelism) or parallelism)
    return IndexStats(spark, index_dir, None if commitlog is None else str(commitlog), opts, targets, manifest,
                      filter_bits, check_crc, split_bytes)


__all__ = ["INDEX_SOURCE_NAME", "IndexDataSource", "IndexSourceOptions", "IndexStats", "index_stats",
           "read_index_items", "register_index_source"]
