"""The ``rocketmq-commitlog`` Spark data source: CommitLog segments -> split-wise Arrow batches.

In: a broker store (holding ``commitlog/``) or a CommitLog directory, local or any URI pyarrow.fs opens,
and string options (see :class:`SourceOptions`). Out, by ``output``:

* ``messages`` (default): one row per valid record, :data:`rocketidx.commitlog.columns.MESSAGE_SCHEMA`;
* ``entries``: one row per index entry, ``(window, phy_offset, entry_seq, key_hash, store_timestamp_ms)``
  (:data:`ENTRY_ROWS`), in broker order within a split;
* ``stops``: one row per split saying where its reading ended and why (:data:`STOP_ROWS`);
* ``shuffle``: what the Spark build shuffles (:data:`SHUFFLE_ROWS`): one *bundle* row per window per
  decoded batch, holding that window's messages of the batch in CommitLog order as packed fixed-width
  columns (offsets, store times, entry counts, then every entry's key hash in entry order), plus each
  split's *info row* (``window`` null, ``info`` = :class:`RangeInfo` JSON) repeated ``stop_replicas``
  times with ``phy_offset`` numbering the copies. Key strings never leave the task.

Stays true:
* this module only adapts the core to Spark: :func:`rocketidx.commitlog.splits.plan_splits` plans the splits,
  :func:`rocketidx.commitlog.readers.read_split` reads one (its records that START in the range, resynchronising on
  PHYSICALOFFSET), :func:`rocketidx.commitlog.splits.resolve_stops` turns every split's info into the broker's
  recovery view, and :mod:`rocketidx.index.bundles` packs the shuffle rows;
* the planner (``partitions()``) and ``read()`` keep no state: options are parsed once, into a frozen
  :class:`SourceOptions`; partitions are frozen :class:`RangePartition` values wrapping a core split.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rocketidx.commitlog.segments import SegmentRange, list_segments
from rocketidx.errors import ConfigError, RocketIdxError
from rocketidx.index.bundles import BUNDLE_ROWS, pack_bundles
from rocketidx.commitlog.splits import (DEFAULT_BATCH_RECORDS, DEFAULT_SPLIT_BYTES, RangeInfo, ResolvedStops, SplitSpec, plan_splits, resolve_stops)
from rocketidx.commitlog.readers import read_split as read_core_split
from rocketidx.index.windows import assign_windows
from rocketidx.units import optional, parse_bool, parse_count, parse_duration_ms, parse_size, parse_time_ms

log = logging.getLogger(__name__)

SOURCE_NAME = "rocketmq-commitlog"
OUTPUTS = ("messages", "entries", "stops", "shuffle")

ENTRY_ROWS = pa.schema([
    ("window", pa.int64()),
    ("phy_offset", pa.int64()),
    ("entry_seq", pa.int32()),
    ("key_hash", pa.int32()),
    ("store_timestamp_ms", pa.int64()),
])

# What the Spark build shuffles: the core's bundle rows (rocketidx.index.bundles), plus each split's info row.
SHUFFLE_ROWS = pa.schema(list(BUNDLE_ROWS) + [
    ("info", pa.binary()),  # RangeInfo JSON on info rows (window null, phy_offset = copy number), else null
])

STOP_ROWS = pa.schema([
    ("range_index", pa.int32()),
    ("path", pa.string()),
    ("segment", pa.string()),
    ("base_offset", pa.int64()),
    ("segment_size", pa.int64()),
    ("range_start", pa.int64()),
    ("range_end", pa.int64()),
    ("first_record", pa.int64()),  # segment offset of the first record found, null when none starts here
    ("records", pa.int64()),
    ("rollback_skipped", pa.int64()),
    ("segment_offset", pa.int64()),  # where this split's reading ended
    ("phy_offset", pa.int64()),
    ("kind", pa.string()),
    ("reason", pa.string()),
    ("phy_mismatch_at", pa.int64()),  # first record whose PHYSICALOFFSET is not its position, or null
    ("reader", pa.string()),  # kernel or numpy: what the executor that read the split ran
])

# --- options ------------------------------------------------------------------------------------

def _int(options: Mapping[str, str], name: str, *, minimum: int = 0) -> int | None:
    return optional(parse_count, options, name, minimum=minimum)


def _int_list(options: Mapping[str, str], name: str) -> tuple[int, ...]:
    raw = str(options.get(name) or "").strip()
    if not raw:
        return ()
    try:
        return tuple(sorted(int(x) for x in raw.split(",") if x.strip()))
    except ValueError:
        raise ConfigError(name, raw, "expected comma-separated integers") from None


def _intervals(options: Mapping[str, str], name: str) -> tuple[tuple[int, int], ...]:
    raw = str(options.get(name) or "").strip()
    if not raw:
        return ()
    out = []
    for piece in raw.split(","):
        lo, sep, hi = piece.strip().partition("-")
        try:
            if not sep or int(lo) > int(hi):
                raise ValueError
            out.append((int(lo), int(hi)))
        except ValueError:
            raise ConfigError(name, raw, "expected comma-separated START-END absolute offsets") from None
    return tuple(sorted(out))


@dataclass(frozen=True, kw_only=True)
class SourceOptions(SplitSpec):
    """The data source's options, parsed once. Every option arrives as a string; what splits are and
    what they keep is the core's :class:`rocketidx.commitlog.splits.SplitSpec`, this adds where and what comes out.

    ``path``            store or CommitLog directory (local path, or a URI pyarrow.fs opens)
    ``output``          messages | entries | stops
    ``from_offset``     absolute CommitLog offset: only records starting at or after it
    ``to_offset``       absolute CommitLog offset: only records starting before it
    ``from_time``       store time (epoch ms or ISO-8601): only messages stored at or after it
    ``to_time``         store time: only messages stored before it
    ``check_crc``       true (default) | false: check each body's CRC, as the broker's recovery does
    ``split_bytes``     bytes per split (default 128m)
    ``batch_records``   records decoded per Arrow batch (default 65536)
    ``window``          entries, shuffle: window length (1h, 15m, 0 = one window; default 1h)
    ``stop_replicas``   shuffle: copies of each split's info row (one per writer partition)
    ``whole_segments``  base offsets of segments read as one split (no resync inside them)
    ``skip_offsets``    ``START-END,...`` absolute offset intervals whose records are left out
    ``skip_entries``    entries, shuffle: drop the first N entries of the message at ``from_offset`` (a
                        backfill continues a file that already holds them)
    """

    path: str
    output: str = "messages"
    window_ms: int = 3_600_000
    stop_replicas: int = 1

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SourceOptions":
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        path = opts.get("path")
        if not path:
            raise ConfigError("path", path, "give the store or CommitLog directory: .load(PATH)")
        output = str(opts.get("output", "messages")).strip().lower()
        if output not in OUTPUTS:
            raise ConfigError("output", output, f"must be one of {', '.join(OUTPUTS)}")
        parsed = cls(
            path=str(path),
            output=output,
            from_offset=_int(opts, "from_offset", minimum=0),
            to_offset=_int(opts, "to_offset", minimum=0),
            from_time_ms=parse_time_ms(opts["from_time"], "from_time") if opts.get("from_time") else None,
            to_time_ms=parse_time_ms(opts["to_time"], "to_time") if opts.get("to_time") else None,
            check_crc=parse_bool(opts.get("check_crc", "true"), "check_crc"),
            split_bytes=parse_size(opts.get("split_bytes", DEFAULT_SPLIT_BYTES), "split_bytes"),
            batch_records=_int(opts, "batch_records", minimum=1) or DEFAULT_BATCH_RECORDS,
            window_ms=parse_duration_ms(opts.get("window", "1h"), "window"),
            stop_replicas=_int(opts, "stop_replicas", minimum=1) or 1,
            whole_segments=_int_list(opts, "whole_segments"),
            skip_offsets=_intervals(opts, "skip_offsets"),
            skip_entries=_int(opts, "skip_entries", minimum=0) or 0,
        )
        if parsed.skip_entries and parsed.from_offset is None:
            raise ConfigError("skip_entries", parsed.skip_entries, "needs from_offset (the message it applies to)")
        if parsed.from_offset is not None and parsed.to_offset is not None and parsed.from_offset > parsed.to_offset:
            raise ConfigError("to_offset", parsed.to_offset, f"is before from_offset {parsed.from_offset}")
        if parsed.from_time_ms is not None and parsed.to_time_ms is not None and parsed.from_time_ms > parsed.to_time_ms:
            raise ConfigError("to_time", opts.get("to_time"), f"is before from_time {opts.get('from_time')}")
        return parsed

    def as_options(self) -> dict[str, str]:
        """The string options that parse back to this object (what a DataFrameReader takes)."""
        out = {"path": self.path, "output": self.output, "check_crc": str(self.check_crc).lower(),
               "split_bytes": str(self.split_bytes), "batch_records": str(self.batch_records),
               "window": str(self.window_ms), "stop_replicas": str(self.stop_replicas)}
        for name, value in (("from_offset", self.from_offset), ("to_offset", self.to_offset),
                            ("from_time", self.from_time_ms), ("to_time", self.to_time_ms)):
            if value is not None:
                out[name] = str(value)
        if self.whole_segments:
            out["whole_segments"] = ",".join(map(str, self.whole_segments))
        if self.skip_offsets:
            out["skip_offsets"] = ",".join(f"{lo}-{hi}" for lo, hi in self.skip_offsets)
        if self.skip_entries:
            out["skip_entries"] = str(self.skip_entries)
        return out


class RangePartition(InputPartition):
    """One split for Spark: the core :class:`rocketidx.commitlog.segments.SegmentRange` (``value``), frozen and
    picklable; ``index`` orders all splits."""

    def __init__(self, split: SegmentRange) -> None:
        super().__init__(split)

    @property
    def split(self) -> SegmentRange:
        return self.value

    @property
    def index(self) -> int:
        return self.value.index


def plan_partitions(opts: SourceOptions) -> list[RangePartition]:
    """The core's splits of ``opts.path`` (local or URI), clipped to ``[from_offset, to_offset)``."""
    segments = list_segments(opts.path, from_offset=opts.from_offset, to_offset=opts.to_offset)
    return [RangePartition(s) for s in plan_splits(segments, opts)]


# --- reading one split ----------------------------------------------------------------------------

def read_split(part: RangePartition | SegmentRange, opts: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The batches ``opts.output`` asks for, for one split (what ``DataSourceReader.read`` yields)."""
    from rocketidx.commitlog.columns import records_to_batch
    split = part.split if isinstance(part, RangePartition) else part
    want = opts.output
    reading = read_core_split(split, opts, entries=want in ("entries", "shuffle"), chunks=want != "stops")
    while True:
        try:
            chunk = next(reading)
        except StopIteration as done:
            info: RangeInfo = done.value
            break
        if want == "messages":
            yield records_to_batch(chunk.buf, chunk.segment, chunk.recs)
        elif want == "entries":
            e = chunk.entries
            ts = e.column("store_timestamp_ms")
            yield pa.RecordBatch.from_arrays(
                [pa.array(assign_windows(ts.to_numpy(), opts.window_ms)), e.column("phy_offset"),
                 e.column("entry_seq"), e.column("key_hash"), ts], schema=ENTRY_ROWS)
        else:
            rows = pack_bundles(chunk.entries, opts.window_ms, chunk.positions)
            rows["info"] = [None] * len(rows["window"])
            yield pa.RecordBatch.from_pydict(rows, schema=SHUFFLE_ROWS)
    if want == "stops":
        yield _stop_batch(info)
    elif want == "shuffle":
        n = opts.stop_replicas
        cols = {f.name: [None] * n for f in SHUFFLE_ROWS}
        cols.update(phy_offset=list(range(n)), info=[info.to_json()] * n)
        yield pa.RecordBatch.from_pydict(cols, schema=SHUFFLE_ROWS)


def _stop_batch(info: RangeInfo) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{
        "range_index": info.index, "path": info.path, "segment": info.path.rsplit("/", 1)[-1],
        "base_offset": info.base_offset, "segment_size": info.size, "range_start": info.start,
        "range_end": info.end, "first_record": info.first, "records": info.records,
        "rollback_skipped": info.rollback, "segment_offset": info.stop_offset, "phy_offset": info.base_offset + info.stop_offset,
        "kind": info.stop_kind, "reason": info.stop_reason, "phy_mismatch_at": info.phy_mismatch_at,
        "reader": info.reader}],
        schema=STOP_ROWS)


def info_from_stop_row(row) -> RangeInfo:
    """A :class:`RangeInfo` back from a row of the ``stops`` output (counters other than records are 0)."""
    get = row.asDict() if hasattr(row, "asDict") else dict(row)
    return RangeInfo(get["range_index"], get["path"], get["base_offset"], get["segment_size"], get["range_start"],
                     get["range_end"], get["first_record"], get["segment_offset"], get["kind"], get["reason"],
                     get["records"], get["rollback_skipped"], phy_mismatch_at=get["phy_mismatch_at"],
                     reader=get.get("reader") or "")


# --- the Spark data source ------------------------------------------------------------------------

def spark_schema(output: str):
    from pyspark.sql.pandas.types import from_arrow_schema
    from rocketidx.commitlog.columns import MESSAGE_SCHEMA
    return from_arrow_schema({"messages": MESSAGE_SCHEMA, "entries": ENTRY_ROWS, "stops": STOP_ROWS,
                              "shuffle": SHUFFLE_ROWS}[output])


class CommitLogDataSource(DataSource):
    """``spark.read.format("rocketmq-commitlog").option(...).load(PATH)``; options in :class:`SourceOptions`."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self):
        return spark_schema(self.opts.output)

    def reader(self, schema) -> "CommitLogSourceReader":
        return CommitLogSourceReader(self.opts)


class CommitLogSourceReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        return plan_partitions(self.opts)

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        from rocketidx.spark.sources.commitlog import read_split  # the worker imports the module, not the closure
        from rocketidx.spark.tasks import task_setup
        task_setup()
        return read_split(partition, self.opts)


def register(spark) -> None:
    """Make ``spark.read.format("rocketmq-commitlog")`` available in this session (once per session)."""
    if getattr(spark, "_rocketidx_registered", False):
        return
    spark.dataSource.register(CommitLogDataSource)
    spark._rocketidx_registered = True


# --- the broker-recovery view of the messages -----------------------------------------------------

@dataclass(frozen=True)
class MessagesRead:
    """``read_messages``' answer: the DataFrame and how reading ended (``resolved.stop``, ``stops``)."""

    df: object
    resolved: ResolvedStops
    options: SourceOptions


def read_messages(spark, path: str, **options) -> MessagesRead:
    """Messages exactly as the broker's recovery reads them, at any split size (two passes).

    A first ``stops`` pass finds every split's stop; :func:`resolve_stops` gives the first final stop
    and blank tails (and segments whose splits disagree, which are then read as one split); the second
    pass reads the messages with those offsets left out. Options as :class:`SourceOptions`.
    """
    register(spark)
    opts = SourceOptions.parse(dict({k: str(v) for k, v in options.items() if v is not None}, path=path))
    resolved = resolve_split_stops(spark, opts)
    final = replace(opts, output="messages",
                    skip_offsets=tuple(sorted(set(opts.skip_offsets) | set(resolved.skip_intervals))))
    final = replace(final, whole_segments=resolved.whole_segments(opts.whole_segments))
    if resolved.stop and resolved.stop["kind"] == "corrupt":
        log.info("reading stopped for good at %s + %d: %s", resolved.stop["segment"],
                 resolved.stop["segment_offset"], resolved.stop["reason"])
    df = spark.read.format(SOURCE_NAME).options(**final.as_options()).load()
    return MessagesRead(df, resolved, final)


def resolve_split_stops(spark, opts: SourceOptions) -> ResolvedStops:
    """Run the ``stops`` pass and resolve it; segments with a chain break are reread as one split."""
    for _ in range(2):
        rows = (spark.read.format(SOURCE_NAME).options(**replace(opts, output="stops").as_options()).load()
                .collect())
        resolved = resolve_stops(info_from_stop_row(r) for r in rows)
        if not resolved.chain_breaks:
            return resolved
        log.info("splits disagree on where records start (%s); reading those segments unsplit",
                 "; ".join(map(str, resolved.chain_breaks)))
        opts = replace(opts, whole_segments=resolved.whole_segments(opts.whole_segments))
    raise RocketIdxError(f"split chain still broken after rereading whole segments: {resolved.chain_breaks}")
