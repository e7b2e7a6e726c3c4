"""IndexFiles + CommitLog -> :class:`VerifyReport` on Spark: ``rocketidx verify`` for large stores.

In: the IndexFiles to check (oldest first: :class:`IndexFile` values, as :func:`rocketidx.verify.core.
open_for_verify` opens them, or paths), optionally the CommitLog they index, and a SparkSession. Out:
the very :class:`VerifyReport` that :func:`rocketidx.verify.core.verify_index` returns for the same input
(same problems in the same order, same counts, files, ``entries_checked``, ``expected_entries`` and
``covered_range``); the checks are listed in :mod:`rocketidx.verify.core`.

The plan::

    spark.range(groups) -> mapInArrow(structure_task)   verify.check_structure of each file (a big file
                                                       is a task of its own, small ones share one); one
                                                       row back per file: its listed problems, counts,
                                                       item count, lowest and highest phyOffset
    with a CommitLog, over the covered range [lo, hi] of those offsets:
    rocketmq-commitlog, output=stops                   the broker-recovery view (resolve_split_stops,
                                                       as read_messages does)
    rocketmq-commitlog, output=shuffle, window 0       the entries, the stops' skips applied, already
      -> mapInArrow(entries_task)                      packed per decoded batch (the build's own rows)
    spark.range(groups) -> mapInArrow(items_task)      the items, read in chunks of items_per_task
      both as PACKED_ROWS: one row per (batch, range), range = phyOffset div split_bytes, so every
      entry of a message and every item pointing at it meet in one group
      -> repartition(range).groupBy(range)
         .applyInArrow(check_range)                    the core's content judge on that range
                                                       (rocketidx.verify.content.judge_content, as the in-process
                                                       verify calls it): time-diff, window, the
                                                       (phyOffset, keyHash) multiset compare (extra,
                                                       missing), "candidate" rows for items at an offset
                                                       without entries; and the range's entry count
      -> problem rows (file, kind, offset, a, b, n), cached
    only when there are candidates:
    rocketmq-commitlog, output=messages                is the offset a message that makes no entry (a
                                                       rollback, no keys)? then the item is extra, else
                                                       not-a-message
    driver: per (file, kind) the count and the first MAX_LISTED_PER_KIND + 1 rows by offset

Why packed range groups rather than a row per item and per entry through ``groupBy(phy, kh)`` and a full
outer join: on the bench store (2.5 M messages, 6.1 M entries, two cores) that plan spent 67 s in
Spark's aggregations, joins and row <-> Arrow conversions, where this one's content job takes 12 s; the
multiset compare of one range is a few numpy sorts (0.3 s for 460,000 entries and items).

Stays true: no task holds more than one file's arrays (structure), one read batch, or one range's
entries and the items pointing into it (``split_bytes`` of CommitLog: ~450,000 entries of the bench
store per 128 MiB; an index whose items pile onto one range makes that group large); the driver gets
one row per file and at most ``MAX_LISTED_PER_KIND + 1`` problem rows per (file, kind), never items or
entries. The messages pass decodes every column (2-4x the time of the entries pass), so it runs only
when an item points at an offset without entries.

Problems are grouped as in the core: each of its ``report.add`` calls is one (file, kind) group here
(``time-diff`` found by the structure check and by the content check are separate groups, as they are
two calls there), listed in offset order, ``missing`` in (phyOffset, keyHash) order.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, replace
from functools import partial
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from rocketidx.arrays import pack
from rocketidx.commitlog.splits import DEFAULT_SPLIT_BYTES
from rocketidx.index.reader import FileRef, IndexFile, iter_items
import rocketidx.layout as L
from rocketidx.output.open import open_index_dir
from rocketidx.spark.sources.commitlog import SOURCE_NAME, SourceOptions, register, resolve_split_stops
from rocketidx.spark.tasks import grouped, spark_schema, task_setup, typed_task_errors
import rocketidx.storage as storage
from rocketidx.verify.content import CANDIDATE, ContentParams, EntryRows, Found, ItemRows, describe, judge_content
from rocketidx.verify.core import BuildRead, check_structure, log_mismatch, unexpired_spans, verify_index
from rocketidx.verify.coverage import add_gap_problems, log_gaps
from rocketidx.verify.report import MAX_LISTED_PER_KIND, FileSummary, Problem, VerifyReport, listing_order

log = logging.getLogger(__name__)

DEFAULT_ITEMS_PER_TASK = 4 << 20  # 80 MiB of items per read task
ITEM_BATCH = 1 << 16  # items per Arrow batch a read task yields (1.3 MiB of item bytes)

_KIND_COUNT = pa.struct([("kind", pa.string()), ("n", pa.int64())])
_LISTED = pa.struct([("offset", pa.int64()), ("kind", pa.string()), ("detail", pa.string())])
STRUCTURE_ROWS = pa.schema([
    ("file", pa.int32()),
    ("items", pa.int64()),  # items checked (indexCount - 1); -1: indexCount out of range, items unread
    ("min_phy_offset", pa.int64()),  # null without items
    ("max_phy_offset", pa.int64()),
    ("counts", pa.list_(_KIND_COUNT)),  # problems found, by kind (complete)
    ("problems", pa.list_(_LISTED)),  # problems listed (as report.add caps them)
])
# Items and entries cross the shuffle packed: a row per (read batch, range) of little-endian arrays.
# Spark's cost is per row (rows -> Arrow for Python alone took 8 s of 6.1 M items and 6.1 M entries
# on the bench store); a packed row carries the same values.
PACKED_ROWS = pa.schema([
    ("range", pa.int64()),  # phyOffset div split_bytes
    ("is_entry", pa.bool_()),
    ("phy", pa.binary()),  # int64 per row
    ("kh", pa.binary()),  # int32 per row
    ("ts", pa.binary()),  # entries: store time, int64 per row
    ("file", pa.binary()),  # items: file number, int32 per row
    ("item", pa.binary()),  # items: item number, int32 per row
    ("td", pa.binary()),  # items: time diff, int32 per row
])
_PACKED_TYPES = {"phy": "<i8", "kh": "<i4", "ts": "<i8", "file": "<i4", "item": "<i4", "td": "<i4"}

# One row per problem the content checks found; a and b carry the numbers its detail names.
PROBLEM_ROWS = pa.schema([
    ("file", pa.int32()),  # -1 on the "expected" rows
    ("kind", pa.string()),  # a problem kind, or "candidate" (offset without entries), "expected" (count)
    ("offset", pa.int64()),
    ("a", pa.int64()),  # not-a-message, extra, missing, candidate: phyOffset; time-diff: the item's diff
    ("b", pa.int64()),  # extra, missing, candidate: keyHash; time-diff: the diff the store time gives
    ("n", pa.int64()),  # problems the row stands for (missing: entries of one (phyOffset, keyHash))
])
EXPECTED = "expected"  # a range's entry count



@dataclass(frozen=True)
class ItemChunk:
    """Items ``[lo, hi)`` of file number ``file``."""

    file: int
    ref: FileRef
    lo: int
    hi: int


# --- what the tasks run --------------------------------------------------------------------------

def structure_task(batches: Iterator[pa.RecordBatch], *, groups: Sequence[Sequence[int]],
                   refs: Sequence[FileRef]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over group numbers: :func:`check_structure` of each file of the group, one after
    the other, one :data:`STRUCTURE_ROWS` row each."""
    task_setup()
    for ids in batches:
        for i in (i for g in ids.column("id").to_pylist() for i in groups[g]):
            ref = refs[i]
            report = VerifyReport()
            arrays = check_structure(ref.open(check=False), report)
            phy = arrays["phy"] if arrays is not None else np.zeros(0, np.int64)
            yield pa.RecordBatch.from_pydict({
                "file": [i], "items": [len(phy) if arrays is not None else -1],
                "min_phy_offset": [int(phy.min()) if len(phy) else None],
                "max_phy_offset": [int(phy.max()) if len(phy) else None],
                "counts": [[{"kind": k, "n": n} for k, n in report.counts.items()]],
                "problems": [[{"offset": p.offset, "kind": p.kind, "detail": p.detail} for p in report.problems]],
            }, schema=STRUCTURE_ROWS)


def _pack(range_ids: np.ndarray, is_entry: bool, columns: dict[str, np.ndarray]) -> pa.RecordBatch:
    """One :data:`PACKED_ROWS` row per distinct range id (rows keep their order within a range)."""
    if len(range_ids) and range_ids[0] == range_ids[-1] and (range_ids == range_ids[0]).all():  # the usual case
        groups = [(int(range_ids[0]), slice(None))]
    else:
        order = np.argsort(range_ids, kind="stable")
        cuts = np.flatnonzero(np.diff(range_ids[order])) + 1
        groups = [(int(range_ids[g[0]]), g) for g in np.split(order, cuts) if len(g)]
    rows = {f.name: [] for f in PACKED_ROWS}
    for r, sel in groups:
        rows["range"].append(r)
        rows["is_entry"].append(is_entry)
        for name, dt in _PACKED_TYPES.items():
            rows[name].append(columns[name][sel].astype(dt, copy=False).tobytes() if name in columns else None)
    return pa.RecordBatch.from_pydict(rows, schema=PACKED_ROWS)


def _unpack(table: pa.Table, name: str) -> np.ndarray:
    blobs = table.column(name).to_pylist()
    return np.concatenate([np.frombuffer(b, _PACKED_TYPES[name]) for b in blobs]) if blobs else \
        np.zeros(0, _PACKED_TYPES[name])


def items_task(batches: Iterator[pa.RecordBatch], *, groups: Sequence[Sequence[ItemChunk]], split_bytes: int,
               lo: int = 0) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over group numbers: each chunk of the group, ``ITEM_BATCH`` items at a time, as
    :data:`PACKED_ROWS`, read by :func:`rocketidx.index.reader.iter_items` (a task's RSS is one batch, not
    the file; a file cut short raises :class:`CorruptIndexError` naming it and the byte). Items below ``lo``
    (the log's first offset, where retention removed messages: the driver counted them) are left out."""
    task_setup()
    for ids in batches:
        for ch in (ch for g in ids.column("id").to_pylist() for ch in groups[g]):
            for a, items in iter_items(ch.ref.path, ch.ref.hash_slot_num, ch.lo, ch.hi, ITEM_BATCH):
                phy = items["phy_offset"].astype(np.int64)
                item = np.arange(a, a + len(items))
                keep = phy >= lo
                if not keep.all():
                    items, phy, item = items[keep], phy[keep], item[keep]
                yield _pack(np.floor_divide(phy, split_bytes), False, {
                    "phy": phy, "kh": items["key_hash"], "td": items["time_diff_s"],
                    "file": np.full(len(items), ch.file, np.int32), "item": item})


def entries_task(batches: Iterator[pa.RecordBatch], *, split_bytes: int, lo: int, hi: int,
                 rules: BuildRead = BuildRead()) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over the source's ``shuffle`` rows (entries already packed per decoded batch): the
    entries of messages in ``[lo, hi]`` the build kept (``rules``: its time filter) as :data:`PACKED_ROWS`."""
    from rocketidx.index.bundles import iter_bundles
    task_setup()
    for batch in batches:
        for bundle in iter_bundles(batch):
            phy, kh, ts = bundle.entries()
            keep = (phy >= lo) & (phy <= hi) & rules.in_time(ts)
            if not keep.all():
                phy, kh, ts = phy[keep], kh[keep], ts[keep]
            if len(phy):
                yield _pack(np.floor_divide(phy, split_bytes), True, {"phy": phy, "kh": kh, "ts": ts})


def _problems(file, kind: str, offset, a=None, b=None, n=None) -> pa.RecordBatch:
    f = Found.of(kind, file, offset, a, b, n)
    return pa.RecordBatch.from_arrays([
        pa.array(f.file.astype(np.int32)), pa.array([kind] * len(f.offset), pa.string()), pa.array(f.offset),
        pa.array(f.a), pa.array(f.b), pa.array(f.n)], schema=PROBLEM_ROWS)


def check_range(table: pa.Table, params: ContentParams) -> list[pa.RecordBatch]:
    """One range group: its entries (rows with ``is_entry``) and the items pointing into it, judged by
    the core's :func:`rocketidx.verify.content.judge_content` (which knows no messages here, so an item at an
    offset without entries comes back a ``candidate`` for the messages pass), as :data:`PROBLEM_ROWS`,
    and the range's entry count (an ``expected`` row)."""
    is_entry = table.column("is_entry").to_numpy(zero_copy_only=False)
    ent, it = table.filter(pa.array(is_entry)), table.filter(pa.array(~is_entry))
    entries = EntryRows(*(_unpack(ent, c).astype(np.int64, copy=False) for c in ("phy", "kh", "ts")))
    items = ItemRows(*(_unpack(it, c).astype(np.int64, copy=False) for c in ("file", "item", "phy", "kh", "td")))
    out = [_problems(-1, EXPECTED, [0], n=[len(entries.phy)])]
    return out + [_problems(f.file, f.kind, f.offset, f.a, f.b, f.n) for f in judge_content(items, entries, params)]


def _range_table(table: pa.Table, *, params: ContentParams) -> pa.Table:
    task_setup()
    return pa.Table.from_batches(check_range(table, params), PROBLEM_ROWS)


# --- the driver -----------------------------------------------------------------------------------

def _open_files(files: Sequence[IndexFile | str | os.PathLike], hash_slot_num: int | None,
                index_num: int | None) -> list[IndexFile]:
    """``files`` as :class:`IndexFile` values: those given as such kept, paths opened with the sizes of
    the directory they are in (:func:`rocketidx.output.open.open_index_dir`'s rule: the arguments, else
    its manifest, else what its files tell, else the broker's)."""
    sizes: dict[str, tuple[int, int]] = {}
    out = []
    for f in files:
        if not isinstance(f, IndexFile):
            f = storage.normalize(f)
            parent = storage.parent(f)
            if parent not in sizes:
                d = open_index_dir(parent, hash_slot_num, index_num)
                sizes[parent] = (d.hash_slot_num, d.index_num)
            f = IndexFile(f, *sizes[parent], check=False)
        out.append(f)
    return out


def _add_listed(report: VerifyReport, file: str, kind: str, total: int, listed: list[tuple[int, str]],
                next_offset: int) -> None:
    """``report.add`` for a group whose offsets stayed in Spark: ``total`` problems, ``listed`` the first
    ``MAX_LISTED_PER_KIND`` (offset, detail), ``next_offset`` the one after them."""
    if total <= 0:
        return
    report.counts[kind] += total
    report.problems.extend(Problem(file, off, kind, d) for off, d in listed[:MAX_LISTED_PER_KIND])
    if total > MAX_LISTED_PER_KIND:
        report.problems.append(Problem(file, next_offset, kind, f"... and {total - MAX_LISTED_PER_KIND} more"))


def _details(kind: str, rows: list, window_id: int | None) -> list[tuple[int, str]]:
    """(offset, detail) of a group's first rows, worded by the core (:func:`rocketidx.verify.content.describe`);
    a ``missing`` row stands for ``n`` entries, each listed."""
    listed: list[tuple[int, str]] = []
    for r in rows:
        take = min(r["n"], MAX_LISTED_PER_KIND - len(listed))
        listed += [(r["offset"], describe(kind, r["a"], r["b"], window_id))] * take
    return listed


def verify_index_spark(files: Sequence[IndexFile | str | os.PathLike], commitlog: str | os.PathLike | None = None,
                       *, spark=None, window_ms: int | None = None, window_ids: Sequence[int] | None = None,
                       check_crc: bool = True, open_end: bool = False, open_start: bool = False,
                       split_bytes: int = DEFAULT_SPLIT_BYTES, items_per_task: int = DEFAULT_ITEMS_PER_TASK,
                       hash_slot_num: int | None = None, index_num: int | None = None,
                       rules: BuildRead | None = None, gaps: bool = True) -> VerifyReport:
    """:func:`rocketidx.verify.core.verify_index` on Spark: the same report, with bounded memory per task.

    ``files``: oldest first, :class:`IndexFile` values (``open_for_verify`` opens a directory and turns
    files of the wrong size into problems) or paths (opened with ``hash_slot_num``/``index_num``, else
    the sizes their directory's manifest or files tell, else the broker's). Every executor must see the
    files and the CommitLog at these paths.
    ``commitlog``, ``window_ms``, ``window_ids``, ``check_crc``, ``open_end``, ``open_start``: as in
    ``verify_index``. ``spark``: the session (default :func:`rocketidx.spark.get_session`);
    ``split_bytes``: CommitLog bytes per read task and per content group; ``items_per_task``: items
    per index read task. A task's typed error (a file that changed size, say) is raised again here.
    ``rules``: as in ``verify_index``. A log whose PHYSICALOFFSET fields are not their records' positions
    (damage) is judged by the core in this process, in its one held pass: the range groups here meet
    a message's entries and items by that field, but the build's endPhyOffset skip needs CommitLog order.
    """
    rules = rules or BuildRead()
    from pyspark.sql import functions as F

    if spark is None:
        from rocketidx.spark.session import get_session
        spark = get_session()
    files = _open_files(files, hash_slot_num, index_num)
    refs = [FileRef(f.path, f.hash_slot_num, f.index_num) for f in files]
    report = VerifyReport()
    if not files:
        if commitlog is not None and gaps:  # every entry of the log is missing, as in process
            add_gap_problems(report, log_gaps(commitlog, None, rules, check_crc=check_crc))
        return report
    cores = spark.sparkContext.defaultParallelism
    by_file = _check_structure(spark, files, refs, items_per_task, report)
    nonempty = [by_file[i] for i in range(len(files)) if by_file[i]["items"] > 0]
    if commitlog is None:
        return report
    if not nonempty:
        if gaps:  # the log outside the files is read in the driver, as in process (rocketidx.verify.coverage)
            add_gap_problems(report, log_gaps(commitlog, None, rules, check_crc=check_crc))
        return report
    if rules.fields_out_of_place:
        return _held_in_driver(files, commitlog, window_ms, window_ids, check_crc, open_end, open_start, rules, gaps)
    # Items below the log's first offset (retention removed their messages) are counted, not judged, as in process.
    spans = {i: (r["items"], r["min_phy_offset"], r["max_phy_offset"]) for i, r in by_file.items() if r["items"] > 0}
    spans = unexpired_spans(files, spans, commitlog, report)
    if not spans:
        return report
    lo = min(b for _, b, _ in spans.values())
    hi = max(e for _, _, e in spans.values())
    report.covered_range = (lo, hi)
    report.log_mismatch = log_mismatch(files, commitlog, check_crc, rules)  # a sample, in the driver

    register(spark)
    opts = SourceOptions(path=str(commitlog), output="shuffle", from_offset=lo, to_offset=hi + 1,
                         check_crc=check_crc, split_bytes=split_bytes, window_ms=0)
    with typed_task_errors():
        resolved = resolve_split_stops(spark, opts)
    if resolved.phy_mismatch:
        return _held_in_driver(files, commitlog, window_ms, window_ids, check_crc, open_end, open_start, rules, gaps)
    opts = replace(opts, skip_offsets=tuple(sorted(set(resolved.skip_intervals))),
                   whole_segments=resolved.whole_segments(opts.whole_segments))
    read = lambda output: spark.read.format(SOURCE_NAME).options(**replace(opts, output=output).as_options()).load()  # noqa: E731
    entries = read("shuffle").where(F.col("window").isNotNull()).mapInArrow(
        partial(entries_task, split_bytes=split_bytes, lo=lo, hi=hi, rules=rules), spark_schema(PACKED_ROWS))
    items = _items_frame(spark, {i: r for i, r in by_file.items() if i in spans}, refs, items_per_task, split_bytes,
                         cores, lo)
    params = ContentParams(
        tuple(L.items_offset(f.hash_slot_num) for f in files), tuple(f.header.begin_timestamp for f in files),
        tuple(spans[i][1] if i in spans else -1 for i in range(len(files))),
        window_ms, tuple(window_ids) if window_ids is not None else None, lo, hi, open_start, open_end,
        tuple(f.header.end_timestamp for f in files), tuple(f.header.index_count - 1 for f in files))
    ranges = max(1, hi // split_bytes - lo // split_bytes + 1)
    partitions = min(ranges, max(cores, int(spark.conf.get("spark.sql.shuffle.partitions"))))
    expected, totals, firsts = _found(entries.unionByName(items).repartition(partitions, "range"), params,
                                      read, lo, hi)
    report.expected_entries = expected
    _list_content(report, files, window_ids, totals, firsts)
    if gaps:
        add_gap_problems(report, log_gaps(commitlog, (lo, hi), rules, check_crc=check_crc))
    return report


def _items_frame(spark, by_file: dict, refs: list[FileRef], items_per_task: int, split_bytes: int, cores: int,
                 lo: int):
    """The index side: the items of ``by_file``'s files at or past ``lo`` in chunks of ``items_per_task``, chunks
    packed into tasks."""
    chunks = [ItemChunk(i, refs[i], a, min(r["items"] + 1, a + items_per_task))
              for i, r in sorted(by_file.items()) if r["items"] > 0
              for a in range(L.FIRST_INDEX, r["items"] + 1, items_per_task)]
    sizes = [ch.hi - ch.lo for ch in chunks]
    chunk_groups = [[chunks[i] for i in g]
                    for g in pack(sizes, max(cores, math.ceil(sum(sizes) / items_per_task)))]
    return (spark.range(0, len(chunk_groups), 1, len(chunk_groups))
            .mapInArrow(partial(items_task, groups=chunk_groups, split_bytes=split_bytes, lo=lo),
                        spark_schema(PACKED_ROWS)))


def _found(rows, params: ContentParams, read, lo: int, hi: int):
    """Judge the entries and items of each range group: (entries the log implies, problem counts by
    (file, kind), the first rows of each kind to list). Offsets where an item points but no entry starts
    are settled against the log's messages: an extra entry, or not a message at all."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def counts(df) -> dict:
        with typed_task_errors():
            return {(r["file"], r["kind"]): r["n"] for r in df.groupBy("file", "kind").agg(F.sum("n").alias("n")).collect()}

    cached = []
    try:
        found = (rows.groupBy("range").applyInArrow(grouped(_range_table, params=params), spark_schema(PROBLEM_ROWS))
                 .persist(StorageLevel.MEMORY_AND_DISK))
        cached.append(found)
        totals = counts(found)
        expected = int(totals.pop((-1, EXPECTED), 0))
        if any(kind == CANDIDATE for _, kind in totals):
            messages = read("messages").select(F.col("phy_offset").alias("phy")).where(
                F.col("phy").between(lo, hi)).distinct().withColumn("is_msg", F.lit(True))
            decided = (found.where(F.col("kind") == CANDIDATE).withColumnRenamed("a", "phy")
                       .join(messages, "phy", "left")
                       .select("file", F.when(F.col("is_msg"), "extra").otherwise("not-a-message").alias("kind"),
                               "offset", F.col("phy").alias("a"), "b", "n"))
            found = found.where(~F.col("kind").isin(CANDIDATE, EXPECTED)).unionByName(decided).persist(
                StorageLevel.MEMORY_AND_DISK)
            cached.append(found)
            totals = counts(found)
        order = Window.partitionBy("file", "kind").orderBy("offset", "a", "b")
        with typed_task_errors():
            firsts = (found.where(F.col("kind") != EXPECTED).withColumn("rank", F.row_number().over(order))
                      .where(F.col("rank") <= MAX_LISTED_PER_KIND + 1).collect()) if totals else []
    finally:
        for df in cached:
            df.unpersist()
    return expected, totals, firsts


def _held_in_driver(files, commitlog, window_ms, window_ids, check_crc, open_end, open_start, rules,
                    gaps: bool = True) -> VerifyReport:
    log.warning("PHYSICALOFFSET fields out of place in %s: verifying in this process, in one held pass", commitlog)
    return verify_index(files, commitlog, window_ms=window_ms, window_ids=window_ids, check_crc=check_crc,
                        open_end=open_end, open_start=open_start, rules=replace(rules, fields_out_of_place=True),
                        gaps=gaps)


def _check_structure(spark, files: list[IndexFile], refs: list[FileRef], items_per_task: int,
                     report: VerifyReport) -> dict[int, dict]:
    """The structure checks in tasks (files packed into about equal groups of items); each file's summary
    and problems go into ``report``. Returns the task rows by file number (items, offset range)."""
    cores = spark.sparkContext.defaultParallelism
    sizes = [max(1, f.header.index_count) for f in files]
    file_groups = pack(sizes, max(cores, math.ceil(sum(sizes) / items_per_task)))
    with typed_task_errors():
        rows = (spark.range(0, len(file_groups), 1, len(file_groups))
                .mapInArrow(partial(structure_task, groups=file_groups, refs=refs), spark_schema(STRUCTURE_ROWS))
                .collect())
    by_file = {r["file"]: r for r in rows}
    for i, f in enumerate(files):
        h, row = f.header, by_file[i]
        summary = FileSummary(f.name, max(0, h.index_count - 1), h.begin_timestamp, h.end_timestamp,
                              h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count)
        report.problems.extend(Problem(f.path, p["offset"], p["kind"], p["detail"]) for p in row["problems"])
        for c in row["counts"]:
            report.counts[c["kind"]] += c["n"]
        summary.problems = sum(c["n"] for c in row["counts"])
        report.files.append(summary)
        report.entries_checked += max(0, row["items"])
    return by_file


def _list_content(report: VerifyReport, files: list[IndexFile], window_ids, totals: dict, firsts: list) -> None:
    """The content problems into ``report`` in the core's order (:func:`listing_order`) and wording; at most
    MAX_LISTED_PER_KIND listed each."""
    groups: dict[tuple[int, str], list] = {}
    for r in sorted(firsts, key=lambda r: r["rank"]):
        groups.setdefault((r["file"], r["kind"]), []).append(r.asDict())
    for i, kind in listing_order(len(files)):
        listed_rows = groups.get((i, kind), [])
        listed = _details(kind, listed_rows, window_ids[i] if window_ids is not None else None)
        next_offset = (listed_rows[MAX_LISTED_PER_KIND]["offset"]
                       if kind != "missing" and len(listed_rows) > MAX_LISTED_PER_KIND else 0)
        _add_listed(report, files[i].path, kind, int(totals.get((i, kind), 0)), listed, next_offset)
        report.files[i].problems += int(totals.get((i, kind), 0))  # the per-file table counts them too


# --- ConsumeQueues ----------------------------------------------------------------------------------------

def verify_consumequeues_spark(directory: str, commitlog=None, *, spark, split_bytes: int = DEFAULT_SPLIT_BYTES,
                               delays_ms: tuple[int, ...] | None = None, check_crc: bool = True,
                               file_size: int | None = None, light_queues=None) -> VerifyReport:
    """:func:`rocketidx.verify.queues.verify_consumequeues` with the CommitLog's queues rebuilt on Spark (the
    build's split-wise plan); the files alone, and the comparison, are checked here as in process."""
    from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS
    from rocketidx.commitlog.splits import SplitSpec
    from rocketidx.output.manifest import CONSUMEQUEUE_DIR
    from rocketidx.spark.build import queues_on_spark
    from rocketidx.verify.queues import verify_consumequeues

    def rebuild(segments, scratch: str, file_size: int, delays: tuple[int, ...], crc: bool):
        built = queues_on_spark(spark, segments, SplitSpec(split_bytes=split_bytes, check_crc=crc), file_size,
                                delays, scratch, spark.sparkContext.defaultParallelism, sync=False,
                                light_queues=light_queues)
        stop = built.resolved.stop
        log_end = stop["phy_offset"] if stop else (segments[-1].end_offset if segments else 0)
        return os.path.join(scratch, CONSUMEQUEUE_DIR), built.queues, log_end

    return verify_consumequeues(directory, commitlog, delays_ms=delays_ms or DEFAULT_DELAYS_MS, check_crc=check_crc,
                                rebuild=rebuild, file_size=file_size)


def verify_store_spark(store, *, spark, split_bytes: int = DEFAULT_SPLIT_BYTES, **kw):
    """:func:`rocketidx.verify.store.verify_store` with its one read (the rebuild of the queues and the index) a
    Spark build, and an index that is not the rebuild's checked on Spark (the same report; ``kw`` as there)."""
    from rocketidx.spark.backfill import SparkBuilder
    from rocketidx.spark.session import SparkSettings
    from rocketidx.verify.store import verify_store
    return verify_store(store, index_check=partial(verify_index_spark, spark=spark, split_bytes=split_bytes),
                        builder=SparkBuilder(SparkSettings(split_bytes=split_bytes), spark), **kw)
