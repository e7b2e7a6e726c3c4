"""The ``rocketmq-index`` data source: IndexFiles as Spark rows, one task per file or per slice of items.

``output=scan``: one row per file from :func:`rocketidx.stats.core.scan_file` (scalars, small nested
tables, per-hash-partition partial key counts as blobs); ``output=items``: the items themselves,
:data:`ITEM_ROWS`, in slices of ``items_per_split``. Options: :class:`IndexSourceOptions`.
Stays true: a task holds one file's slot counts and key hashes, or one slice of items, never more.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rocketidx.arrays import pack
from rocketidx.commitlog.keys import slot_of
from rocketidx.errors import ConfigError
from rocketidx.index.reader import FileRef
from rocketidx.spark.tasks import spark_schema, task_setup
from rocketidx.stats import core
from rocketidx.stats.keys import DEFAULT_TOP, split_key_counts
from rocketidx.units import optional, parse_count, parse_duration_ms


INDEX_SOURCE_NAME = "rocketmq-index"
INDEX_OUTPUTS = ("scan", "items")
DEFAULT_ITEMS_PER_SPLIT = 4 << 20  # items output: 80 MiB of items per task
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


def _opt_int(options: Mapping[str, str], name: str, minimum: int) -> int | None:
    return optional(parse_count, options, name, minimum=minimum)


@dataclass(frozen=True)
class IndexSourceOptions:
    """The ``rocketmq-index`` source's options, parsed once (every option arrives as a string).

    ``path``             build output, its ``index/``, or a directory of IndexFiles (``store/index``)
    ``output``           scan (one row per file, the statistics) | items (one row per item, for SQL)
    ``hash_slot_num``    sizes (default: the manifest's, else what the files tell, else the broker's:
                         :func:`rocketidx.output.open.open_index_dir`)
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
    top: int = DEFAULT_TOP
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
                   top=pick("top", DEFAULT_TOP, 1), bins=pick("bins", core.DEFAULT_BINS, 1),
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
                     for p, h, c in split_key_counts(s.key_hashes, s.key_counts, opts.key_parts)]
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
        from rocketidx.spark.sources.index import items_partition, scan_partition  # the worker imports the module
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
