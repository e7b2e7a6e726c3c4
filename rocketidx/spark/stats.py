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

    rocketmq-index source, output=scan       one task per file: rocketidx.stats.scan_file streams the
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
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Iterator, Mapping

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rocketidx import stats as core
from rocketidx import storage
from rocketidx.arrays import pack
from rocketidx.errors import ConfigError, StoreLayoutError
from rocketidx.indexfile import FileRef
from rocketidx.manifest import Manifest
from rocketidx.keys import slot_of
from rocketidx.spark.tasks import grouped, spark_schema, task_setup, typed_task_errors
from rocketidx.stats_local import StatsResults, commitlog_ranges
from rocketidx.units import optional, parse_count, parse_duration_ms

INDEX_SOURCE_NAME = "rocketmq-index"
INDEX_OUTPUTS = ("scan", "items")
DEFAULT_ITEMS_PER_SPLIT = 4 << 20  # items output: 80 MiB of items per task
DEFAULT_PART_ENTRIES = 16 << 20  # hash partitions: at most ~16 M key hashes per merge task
DEFAULT_TASK_ENTRIES = 8 << 20  # scan: about this many entries (160 MiB of items) per task, files whole

_CHAIN = pa.struct([("chain_length", pa.int64()), ("slots", pa.int64())])
_LONGEST = pa.struct([("slot", pa.int64()), ("length", pa.int64()), ("distinct_hashes", pa.int64()),
                      ("head_item", pa.int64())])
_BIN = pa.struct([("bin", pa.int32()), ("first_slot", pa.int64()), ("slots", pa.int64()),
                  ("used_slots", pa.int64()), ("entries", pa.int64())])
_BUCKET = pa.struct([("bucket_start_ms", pa.int64()), ("entries", pa.int64()), ("messages", pa.int64())])
_KEY_PART = pa.struct([("part", pa.int32()), ("hashes", pa.binary()), ("counts", pa.binary())])

FILE_COLUMNS = [
    ("file", pa.int32()), ("name", pa.string()), ("window_id", pa.int64()), ("window_start_ms", pa.int64()),
    ("seq", pa.int32()), ("begin_timestamp", pa.int64()), ("end_timestamp", pa.int64()),
    ("begin_phy_offset", pa.int64()), ("end_phy_offset", pa.int64()), ("hash_slot_count", pa.int32()),
    ("index_count", pa.int32()), ("hash_slot_num", pa.int32()), ("index_num", pa.int32()),
    ("entries", pa.int64()), ("fill_ratio", pa.float64()), ("used_slots", pa.int64()),
    ("load_factor", pa.float64()), ("slot_usage", pa.float64()), ("expected_used_slots", pa.float64()),
    ("mean_chain", pa.float64()), ("mean_walk", pa.float64()), ("p50_chain", pa.int64()),
    ("p90_chain", pa.int64()), ("p99_chain", pa.int64()), ("max_chain", pa.int64()),
    ("distinct_hashes", pa.int64()), ("entries_per_hash", pa.float64()), ("messages", pa.int64()),
    ("disk_bytes", pa.int64()), ("apparent_bytes", pa.int64()),
]
SCAN_ROWS = pa.schema(FILE_COLUMNS + [
    ("chains", pa.list_(_CHAIN)), ("longest", pa.list_(_LONGEST)), ("bins", pa.list_(_BIN)),
    ("buckets", pa.list_(_BUCKET)), ("key_parts", pa.list_(_KEY_PART)),
])
ITEM_ROWS = pa.schema([
    ("file", pa.int32()), ("name", pa.string()), ("item", pa.int32()), ("key_hash", pa.int32()),
    ("slot", pa.int32()), ("phy_offset", pa.int64()), ("time_diff_s", pa.int32()), ("prev_index", pa.int32()),
    ("item_time_ms", pa.int64()),  # begin_timestamp + time_diff_s * 1000, as the broker reconstructs it
])
KEY_MERGE_ROWS = pa.schema([
    ("part", pa.int32()), ("distinct_hashes", pa.int64()), ("entries", pa.int64()),
    ("multiplicity", pa.list_(pa.struct([("entries_per_hash", pa.int64()), ("key_hashes", pa.int64())]))),
    ("top", pa.list_(pa.struct([("key_hash", pa.int32()), ("entries", pa.int64()), ("files", pa.int64())]))),
    ("filter", pa.binary()),
])
COMMITLOG_ROWS = pa.schema([
    ("topic_buckets", pa.list_(pa.struct(list(core.TOPIC_BUCKET_ROWS)))),
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


# --- options -------------------------------------------------------------------------------------

def _opt_int(options: Mapping[str, str], name: str, minimum: int) -> int | None:
    return optional(parse_count, options, name, minimum=minimum)


@dataclass(frozen=True)
class IndexSourceOptions:
    """The ``rocketmq-index`` source's options, parsed once (every option arrives as a string).

    ``path``             build output, its ``index/``, or a directory of IndexFiles (``store/index``)
    ``output``           scan (one row per file, the statistics) | items (one row per item, for SQL)
    ``hash_slot_num``    sizes (default: the manifest's, else what the files tell, else the broker's:
                         :func:`rocketidx.indexfile.open_index_dir`)
    ``index_num``
    ``bucket``           time bucket of the scan's entry counts (``10m``, ``1h``, ms; default: auto)
    ``top``              longest chains kept per file (default 20)
    ``bins``             slot-table bins per file (default 256)
    ``key_parts``        hash partitions of the scan's key counts (default 1)
    ``tasks``            scan: tasks to spread the files over (default: one per file); a task scans its
                         files one after the other, so memory stays one file's
    ``items_per_split``  items output: items per task, small files sharing a task (default 4194304)
    """

    path: str
    output: str = "scan"
    hash_slot_num: int | None = None
    index_num: int | None = None
    bucket_ms: int | None = None
    top: int = core.DEFAULT_TOP
    bins: int = core.DEFAULT_BINS
    key_parts: int = 1
    tasks: int | None = None
    items_per_split: int = DEFAULT_ITEMS_PER_SPLIT

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "IndexSourceOptions":
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        path = opts.get("path")
        if not path:
            raise ConfigError("path", path, "give the index directory: .load(PATH)")
        output = str(opts.get("output", "scan")).strip().lower()
        if output not in INDEX_OUTPUTS:
            raise ConfigError("output", output, f"must be one of {', '.join(INDEX_OUTPUTS)}")
        bucket_ms = optional(parse_duration_ms, opts, "bucket", minimum=1)
        pick = lambda name, default, minimum: (_opt_int(opts, name, minimum) or default)  # noqa: E731
        return cls(path=str(path), output=output, hash_slot_num=_opt_int(opts, "hash_slot_num", 1),
                   index_num=_opt_int(opts, "index_num", 2), bucket_ms=bucket_ms,
                   top=pick("top", core.DEFAULT_TOP, 1), bins=pick("bins", core.DEFAULT_BINS, 1),
                   key_parts=pick("key_parts", 1, 1), tasks=_opt_int(opts, "tasks", 1),
                   items_per_split=pick("items_per_split", DEFAULT_ITEMS_PER_SPLIT, 1))

    def as_options(self) -> dict[str, str]:
        out = {"path": self.path, "output": self.output, "top": str(self.top), "bins": str(self.bins),
               "key_parts": str(self.key_parts), "items_per_split": str(self.items_per_split)}
        for name in ("hash_slot_num", "index_num", "bucket_ms", "tasks"):
            value = getattr(self, name)
            if value is not None:
                out["bucket" if name == "bucket_ms" else name] = str(value)
        return out


@dataclass(frozen=True)
class ItemSlice:
    """Items ``[lo, hi)`` of one file, with the file's begin timestamp (items hold time diffs)."""

    ref: FileRef
    lo: int
    hi: int
    begin_timestamp: int


@dataclass(frozen=True)
class ScanPartition(InputPartition):
    """Files one scan task reads, one after the other."""

    refs: tuple
    bucket_ms: int


@dataclass(frozen=True)
class ItemsPartition(InputPartition):
    """Item slices one items task reads."""

    slices: tuple


def index_span_ms(refs: list[FileRef]) -> tuple[int, int]:
    """(first begin, last end) store time over the files that hold entries; headers only."""
    begins, ends = [], []
    for r in refs:
        h = core.read_header(r.path, r.hash_slot_num, r.index_num)
        if h.index_count > 1:
            begins.append(h.begin_timestamp)
            ends.append(h.end_timestamp)
    return (min(begins), max(ends)) if begins else (0, 0)


def plan_index_partitions(opts: IndexSourceOptions) -> list:
    refs, _ = core.file_refs(opts.path, opts.hash_slot_num, opts.index_num)
    headers = [core.read_header(r.path, r.hash_slot_num, r.index_num) for r in refs]
    if opts.output == "scan":
        if opts.bucket_ms:
            bucket_ms = opts.bucket_ms
        else:
            begin, end = index_span_ms(refs)
            bucket_ms = core.auto_bucket_ms(max(1, end - begin))
        groups = pack([h.index_count for h in headers], opts.tasks or len(refs))
        return [ScanPartition(tuple(refs[i] for i in g), bucket_ms) for g in groups]
    slices = [ItemSlice(r, lo, min(h.index_count, lo + opts.items_per_split), h.begin_timestamp)
              for r, h in zip(refs, headers) for lo in range(1, h.index_count, opts.items_per_split)]
    sizes = [s.hi - s.lo for s in slices]
    groups = pack(sizes, math.ceil(sum(sizes) / opts.items_per_split))
    return [ItemsPartition(tuple(slices[i] for i in g)) for g in groups]


# --- what the tasks run --------------------------------------------------------------------------

def _struct_list(rows: list[dict], typ: pa.DataType) -> pa.Array:
    return pa.array([rows], pa.list_(typ))


def _columns_list(cols: dict, typ: pa.StructType) -> pa.Array:
    n = len(next(iter(cols.values()))) if cols else 0
    fields = [pa.array(np.asarray(cols[f.name]), f.type) for f in typ]
    values = pa.StructArray.from_arrays(fields, fields=list(typ))
    return pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), values)


def scan_partition(part: ScanPartition, opts: IndexSourceOptions) -> Iterator[pa.RecordBatch]:
    """One :data:`SCAN_ROWS` row per file of the partition."""
    task_setup()
    for ref in part.refs:
        s = core.scan_file(ref, bucket_ms=part.bucket_ms, top=opts.top, bins=opts.bins)
        row = s.row
        arrays = [pa.array([row[name]], typ) for name, typ in FILE_COLUMNS]
        arrays.append(_columns_list({"chain_length": s.chain_lengths, "slots": s.chain_slots}, _CHAIN))
        arrays.append(_struct_list(s.longest, _LONGEST))
        arrays.append(_columns_list(s.bins, _BIN))
        arrays.append(_columns_list(s.buckets, _BUCKET))
        key_parts = [{"part": p, "hashes": h, "counts": c}
                     for p, h, c in core.split_key_counts(s.key_hashes, s.key_counts, opts.key_parts)]
        arrays.append(_struct_list(key_parts, _KEY_PART))
        yield pa.RecordBatch.from_arrays(arrays, schema=SCAN_ROWS)


def items_partition(part: ItemsPartition) -> Iterator[pa.RecordBatch]:
    """The partition's item slices as :data:`ITEM_ROWS`, one batch per chunk read."""
    task_setup()
    for sl in part.slices:
        r = sl.ref
        for a, items in r.iter_items(sl.lo, sl.hi):
            kh = items["key_hash"].astype(np.int32)
            td = items["time_diff_s"].astype(np.int32)
            n = len(items)
            yield pa.RecordBatch.from_arrays([
                pa.array(np.full(n, r.file_index, np.int32)), pa.array([r.name] * n, pa.string()),
                pa.array(np.arange(a, a + n, dtype=np.int32)), pa.array(kh),
                pa.array(slot_of(kh, r.hash_slot_num).astype(np.int32)),
                pa.array(items["phy_offset"].astype(np.int64)), pa.array(td),
                pa.array(items["prev_index"].astype(np.int32)),
                pa.array(sl.begin_timestamp + td.astype(np.int64) * 1000)], schema=ITEM_ROWS)


class IndexDataSource(DataSource):
    """``spark.read.format("rocketmq-index").option(...).load(PATH)``; options in :class:`IndexSourceOptions`."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = IndexSourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return INDEX_SOURCE_NAME

    def schema(self):
        return spark_schema(SCAN_ROWS if self.opts.output == "scan" else ITEM_ROWS)

    def reader(self, schema) -> "IndexReader":
        return IndexReader(self.opts)


class IndexReader(DataSourceReader):
    def __init__(self, opts: IndexSourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list:
        return plan_index_partitions(self.opts)

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        from rocketidx.spark.stats import items_partition, scan_partition  # the worker imports the module
        if self.opts.output == "scan":
            return scan_partition(partition, self.opts)
        return items_partition(partition)


def register_index_source(spark) -> None:
    """Make ``spark.read.format("rocketmq-index")`` available in this session (once per session)."""
    if getattr(spark, "_rocketidx_index_registered", False):
        return
    spark.dataSource.register(IndexDataSource)
    spark._rocketidx_index_registered = True


def read_index_items(spark, index_dir: str, **options):
    """One row per item of every file (:data:`ITEM_ROWS`), for ad-hoc SQL."""
    register_index_source(spark)
    opts = {k: str(v) for k, v in options.items() if v is not None}
    return spark.read.format(INDEX_SOURCE_NAME).options(**opts).option("output", "items").load(str(index_dir))


def merge_key_partition(table: pa.Table, *, top: int, filter_bits: int) -> pa.Table:
    """``applyInArrow``: one hash partition's per-file blobs -> its :data:`KEY_MERGE_ROWS` row."""
    task_setup()
    part = table["part"][0].as_py() if table.num_rows else 0
    k = core.merge_key_counts(table["hashes"].to_pylist(), table["counts"].to_pylist(), top)
    flt = core.hash_filter(np.concatenate([k.repeated, np.array([t["key_hash"] for t in k.top], np.int32)]),
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
    :class:`rocketidx.splits.RangeReader`, reduced to one :data:`COMMITLOG_ROWS` row (nothing per message
    leaves the task)."""
    task_setup()
    from rocketidx.segments import open_segment
    from rocketidx.splits import RangeReader
    flt = np.frombuffer(key_filter, np.uint8)
    for ids in batches:
        for i in ids.column("id").to_pylist():
            rng = ranges[i]
            buf = open_segment(rng.segment)
            tbs, kts = [], []
            try:
                for batch in RangeReader(buf, rng, check_crc=check_crc):
                    tb, kt = core.commitlog_partials(batch, bucket_ms=bucket_ms, key_filter=flt,
                                                     phy_range=phy_range)
                    tbs.append(tb)
                    kts.append(kt)
            finally:
                if hasattr(buf, "close"):
                    buf.close()
            yield _commitlog_row(tbs, kts, parts)


def _commitlog_row(tbs: list[pa.Table], kts: list[pa.Table], parts: int) -> pa.RecordBatch:
    tb = (pa.concat_tables(tbs) if tbs else core.TOPIC_BUCKET_ROWS.empty_table()).group_by(
        ["topic", "bucket_start_ms"]).aggregate([("messages", "sum"), ("indexed_messages", "sum"), ("entries", "sum")])
    tb = pa.table([tb["topic"], tb["bucket_start_ms"], tb["messages_sum"], tb["indexed_messages_sum"],
                   tb["entries_sum"]], schema=core.TOPIC_BUCKET_ROWS)
    kt = (pa.concat_tables(kts) if kts else core.KEY_ROWS.empty_table()).group_by(["key_hash", "key"]).aggregate(
        [("entries", "sum")])
    kt = pa.table([kt["key_hash"], kt["key"], kt["entries_sum"]], schema=core.KEY_ROWS)
    owner = core.hash_partition(kt["key_hash"].to_numpy(), parts)
    key_parts = [{"part": p, "keys": _ipc(kt.filter(pa.array(owner == p)))} for p in np.unique(owner).tolist()]
    return pa.RecordBatch.from_pydict({"topic_buckets": [tb.to_pylist()], "key_parts": [key_parts]},
                                      schema=COMMITLOG_ROWS)


def merge_group_partition(table: pa.Table, *, wanted: frozenset, examples: int) -> pa.Table:
    """``applyInArrow``: one hash partition's key blobs -> its :data:`GROUP_MERGE_ROWS` row."""
    task_setup()
    part = table["part"][0].as_py() if table.num_rows else 0
    totals, groups = core.merge_key_groups([_from_ipc(b) for b in table["keys"].to_pylist()], set(wanted), examples)
    return pa.Table.from_pydict({"part": [part], **{k: [v] for k, v in totals.items()}, "groups": [groups]},
                                schema=GROUP_MERGE_ROWS)


# --- the statistics ------------------------------------------------------------------------------

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
                 targets: core.SizingTargets, manifest: Manifest | None, filter_bits: int, check_crc: bool,
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
                top: int = core.DEFAULT_TOP, bins: int = core.DEFAULT_BINS,
                targets: core.SizingTargets = core.SizingTargets(), key_parts: int | None = None,
                filter_bits: int = core.DEFAULT_FILTER_BITS, check_crc: bool = True,
                split_bytes: int = DEFAULT_SPLIT_BYTES, check_log: bool = True) -> IndexStats:
    """Statistics of the index in ``index_dir`` (and of its keys in ``commitlog``), computed on ``spark``.

    ``bucket_ms``: time bucket (default: about 96 buckets over the index's span); ``top``: longest
    chains and hot keys kept; ``targets``: what the sizing advice aims for; ``key_parts``: hash
    partitions of the key merge (default: the session's parallelism, more past 16 M key hashes each).
    A ``commitlog`` the index was not built from raises :class:`rocketidx.errors.IndexLogMismatchError`
    before any Spark job (a sample of its entries: :mod:`rocketidx.logmatch`; ``check_log=False``: the
    caller has checked).
    """
    index_dir = str(index_dir)
    refs, manifest = core.file_refs(index_dir, hash_slot_num, index_num)
    if not refs:
        raise StoreLayoutError(storage.redact(index_dir), "no IndexFiles found")
    if commitlog is not None:
        from rocketidx.segments import list_segments
        list_segments(commitlog)  # a typed error naming the path, before any Spark job
        if check_log:
            from rocketidx.logmatch import require_index_of_log
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
