"""Messages -> index entries (``IndexService.buildIndex``).

In: a batch of :data:`rocketidx.commitlog.columns.MESSAGE_SCHEMA`, in CommitLog order.
Out: :data:`ENTRY_SCHEMA` rows ``(phy_offset, entry_seq, key_hash, store_timestamp_ms)`` in CommitLog
order, ``entry_seq`` numbering a message's entries from 0 so that ``(phy_offset, entry_seq)`` sorts
entries exactly as the broker puts them.
Stays true: a transaction rollback (``sys_flag & 0xC == 0xC``) makes no entry; ``UNIQ_KEY`` makes the
first entry, ``topic#UNIQ_KEY`` (never split); then every non-empty piece of ``KEYS`` split on U+0020
only, in order, ``topic#piece``; duplicates are kept. Brokers from RocketMQ 5.4.0 on add one more entry
last, ``topic#T#TAGS`` for a message whose TAGS property is not empty (taken whole, never split; 5.5.0
``IndexService.buildIndex``, IndexService.java:267-277): on when :func:`index_rules` says so.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
# pyarrow.compute is imported by the functions that use it: its import takes 40 ms, which a command that never
# calls them (an incremental index build, a query) does not pay.

from rocketidx.arrays import arrow, numpy_of
from rocketidx.commitlog.columns import records_to_batch
from rocketidx.commitlog.keys import hash_to_key_hash, java_string_hash_py, java_utf8_decode, key_hash
from rocketidx.commitlog.native import kernel, use_native
from rocketidx.commitlog.records import (KERNEL_JAVA_CHECK, KERNEL_MORE, check_records, handed_over, kernel_stop,
                                         scan_records)
from rocketidx.commitlog.segments import Segment
from rocketidx.errors import RocketIdxError
import rocketidx.layout as L

ENTRY_SCHEMA = pa.schema([
    ("phy_offset", pa.int64()),
    ("entry_seq", pa.int32()),
    ("key_hash", pa.int32()),
    ("store_timestamp_ms", pa.int64()),
])


_TAG_ENTRIES = False  # the process's rule (index_rules); the compiled kernel knows only the older one


@contextlib.contextmanager
def index_rules(tag_entries: bool) -> Iterator[None]:
    """Within the block, entries follow a broker that adds the tag entry (5.4.0 on: ``tag_entries``) or
    one that does not. The kernel makes only the older entries, so with the tag entry every batch takes
    the reference path (:func:`extract_entries`)."""
    global _TAG_ENTRIES
    before, _TAG_ENTRIES = _TAG_ENTRIES, bool(tag_entries)
    try:
        yield
    finally:
        _TAG_ENTRIES = before


def tag_entries_on() -> bool:
    return _TAG_ENTRIES


def indexable(batch: pa.RecordBatch | pa.Table) -> np.ndarray:
    """Mask of the messages ``buildIndex`` looks at: everything but transaction rollbacks."""
    sys_flag = numpy_of(batch.column("sys_flag"))
    return (sys_flag & L.SYSFLAG_TX_MASK) != L.SYSFLAG_TX_ROLLBACK


def extract_entry_keys(batch: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Every entry of the batch as (message row, entry_seq, key string ``topic#key``), in broker order."""
    import pyarrow.compute as pc
    n = batch.num_rows
    rows = np.arange(n)
    ok = indexable(batch)
    topic = batch.column("topic")
    uniq = batch.column("uniq_key")
    keys = batch.column("keys")
    if isinstance(topic, pa.ChunkedArray):
        topic, uniq, keys = topic.combine_chunks(), uniq.combine_chunks(), keys.combine_chunks()

    has_uniq = ok & uniq.is_valid().to_numpy(zero_copy_only=False)
    u_rows = rows[has_uniq]
    u_keys = pc.binary_join_element_wise(topic.filter(has_uniq), uniq.filter(has_uniq), "#")

    has_keys = ok & keys.is_valid().to_numpy(zero_copy_only=False)
    k_rows_msg = rows[has_keys]
    pieces = pc.split_pattern(keys.filter(has_keys), L.KEY_SEPARATOR)
    parent = pc.list_parent_indices(pieces).to_numpy()
    flat = pc.list_flatten(pieces)
    nonempty = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    k_rows = k_rows_msg[parent[nonempty]]
    k_topics = topic.take(pa.array(k_rows))
    k_keys = pc.binary_join_element_wise(k_topics, flat.filter(pa.array(nonempty)), "#")

    parts_rows, parts_keys = [u_rows, k_rows], [u_keys, k_keys]
    if _TAG_ENTRIES:
        tags = batch.column("tags")
        tags = tags.combine_chunks() if isinstance(tags, pa.ChunkedArray) else tags
        has_tags = ok & pc.fill_null(pc.greater(pc.binary_length(tags), 0), False).to_numpy(zero_copy_only=False)
        parts_rows.append(rows[has_tags])
        parts_keys.append(pc.binary_join_element_wise(topic.filter(has_tags), pa.scalar(L.INDEX_TAG_TYPE),
                                                      tags.filter(has_tags), "#"))
    all_rows = np.concatenate(parts_rows)
    all_keys = pa.concat_arrays(parts_keys) if len(all_rows) else pa.array([], pa.string())
    # Stable sort by message row: UNIQ_KEY entries were placed first, then KEYS, then the tag entry, so
    # they keep that order per message.
    order = np.argsort(all_rows, kind="stable")
    rows_sorted = all_rows[order]
    starts = np.searchsorted(rows_sorted, rows_sorted, side="left")
    seq = (np.arange(len(rows_sorted)) - starts).astype(np.int32)
    return rows_sorted, seq, all_keys.take(pa.array(order))


def extract_entries(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    """The batch's index entries as :data:`ENTRY_SCHEMA`, in broker order."""
    rows, seq, keys = extract_entry_keys(batch)
    phy = numpy_of(batch.column("phy_offset"))[rows]
    ts = numpy_of(batch.column("store_timestamp_ms"))[rows]
    return pa.RecordBatch.from_arrays(
        [pa.array(phy, pa.int64()), pa.array(seq), pa.array(key_hash(keys)), pa.array(ts, pa.int64())],
        schema=ENTRY_SCHEMA)


class EntryBuffers:
    """Output arrays of the compiled kernel's entry functions, reused from call to call."""

    def __init__(self, capacity: int):
        self.grow(capacity)

    def grow(self, capacity: int) -> None:
        self.capacity = capacity
        self.row = np.empty(capacity, np.int64)
        self.phy = np.empty(capacity, np.int64)
        self.ts = np.empty(capacity, np.int64)
        self.seq = np.empty(capacity, np.int32)
        self.hash = np.empty(capacity, np.int32)
        self.slow = np.empty(capacity, np.uint8)
        self.kpos = np.empty(capacity, np.int64)
        self.klen = np.empty(capacity, np.int64)

    def arrays(self) -> tuple:
        return self.row, self.phy, self.ts, self.seq, self.hash, self.slow, self.kpos, self.klen

    def batch(self, buf, recs: np.ndarray, m: int) -> pa.RecordBatch:
        """The first ``m`` entries as :data:`ENTRY_SCHEMA` (copied out, so the buffers can be reused)."""
        raw_hash = self.hash[:m].copy()
        slow = np.flatnonzero(self.slow[:m])
        if len(slow):
            mv = memoryview(buf)
            for i in slow.tolist():  # malformed UTF-8 only: rare, decoded as Java decodes it
                r = recs[self.row[i]]
                topic = bytes(mv[r[L.REC_TOPIC_POS]:r[L.REC_TOPIC_POS] + r[L.REC_TOPIC_LEN]])
                key = bytes(mv[self.kpos[i]:self.kpos[i] + self.klen[i]])
                raw_hash[i] = java_string_hash_py(java_utf8_decode(topic) + "#" + java_utf8_decode(key))
        return pa.RecordBatch.from_arrays(
            [arrow(self.phy[:m].copy()), arrow(self.seq[:m].copy()), arrow(hash_to_key_hash(raw_hash)),
             arrow(self.ts[:m].copy())], schema=ENTRY_SCHEMA)


def entries_from_records(buf, seg, recs: np.ndarray, *, native: bool | None = None) -> pa.RecordBatch:
    """The index entries of a records array (from :func:`rocketidx.commitlog.records.scan_records`).

    With the compiled kernel the keys are split and hashed straight from the segment bytes, so no key
    string is ever built; an entry whose bytes are not valid UTF-8 is re-hashed from its Java decoding.
    Without it, the message columns are built and :func:`extract_entries` runs: the same rows.
    """
    if _TAG_ENTRIES or not use_native(native):
        return extract_entries(records_to_batch(buf, seg, recs))
    recs = np.ascontiguousarray(recs)
    keys_len = np.maximum(recs[:, L.REC_KEYS_LEN], 0)
    out = EntryBuffers(len(recs) + int(((keys_len + 1) // 2).sum()) + 1)
    m = kernel.entries(buf, recs, len(recs), *out.arrays())
    return out.batch(buf, recs, m)


def drop_first_entries(entries: pa.RecordBatch, phy_offset: int | None, n: int) -> pa.RecordBatch:
    """``entries`` without the first ``n`` entries of the message at ``phy_offset``: a backfill continues
    a file that already holds them (the broker rolled over in the middle of that message's keys)."""
    drop = first_entries_mask(entries, phy_offset, n)
    return entries.filter(arrow(~drop)) if drop is not None else entries


def first_entries_mask(entries: pa.RecordBatch, phy_offset: int | None, n: int,
                       positions: np.ndarray | None = None) -> np.ndarray | None:
    """The mask :func:`drop_first_entries` drops (None: nothing), for callers filtering a parallel array;
    ``positions`` (:func:`entry_positions`) finds the message by where it is rather than by its field."""
    if not n or phy_offset is None:
        return None
    at = numpy_of(entries.column("phy_offset")) if positions is None else positions
    drop = (at == phy_offset) & (numpy_of(entries.column("entry_seq")) < n)
    return drop if drop.any() else None


def entry_positions(buf, seg: Segment, recs: np.ndarray, entries: pa.RecordBatch) -> np.ndarray | None:
    """The absolute CommitLog offset of the record each entry comes from, or None when every record of
    ``recs`` holds its own offset in PHYSICALOFFSET (then the entries' ``phy_offset`` is that offset).

    An entry carries the PHYSICALOFFSET field, as ``buildIndex`` indexes it; where a record lies there,
    the engines still need its position, to keep CommitLog order and to cut where reading stopped. Such
    a batch (damage: rare) is mapped back through the reference path, whose entries are the kernel's, in
    the same order.
    """
    pos = seg.base_offset + recs[:, L.REC_POS]
    if len(recs) == 0 or (recs[:, L.REC_PHY] == pos).all():
        return None
    rows, _, _ = extract_entry_keys(records_to_batch(buf, seg, recs))
    if len(rows) != entries.num_rows:
        raise RocketIdxError(f"{seg.path}: {len(rows)} entries from the reference path, {entries.num_rows} "
                             "from the kernel")
    return pos[rows].astype(np.int64)


def rollback_count(recs: np.ndarray) -> int:
    """Transaction rollbacks among the records (they make no entry)."""
    return int(((recs[:, L.REC_SYSFLAG] & L.SYSFLAG_TX_MASK) == L.SYSFLAG_TX_ROLLBACK).sum())


def scan_entry_chunks(buf, seg: Segment, start: int, end: int, *, check_crc: bool = True,
                      batch_records: int = 65536, native: bool | None = None):
    """Like :func:`rocketidx.commitlog.records.scan_records`, but yields ``(records array, entries batch)`` pairs;
    the generator's return value is the :class:`rocketidx.commitlog.records.ReadStop`.

    With the compiled kernel both come from one pass over the bytes, while each record is in cache.
    """
    if _TAG_ENTRIES:  # the records still come from the kernel; their entries from the reference path
        gen = scan_records(buf, seg, start, end, check_crc=check_crc, batch_records=batch_records, native=native)
        while True:
            try:
                recs = next(gen)
            except StopIteration as done:
                return done.value
            yield recs, entries_from_records(buf, seg, recs, native=False)
    if not use_native(native):
        gen = scan_records(buf, seg, start, end, check_crc=check_crc, batch_records=batch_records, native=False)
        while True:
            try:
                recs = next(gen)
            except StopIteration as done:
                return done.value
            yield recs, entries_from_records(buf, seg, recs, native=False)
    out = np.empty((batch_records, L.REC_COLS), np.int64)
    ebuf = EntryBuffers(batch_records * 3)
    p = start
    while True:
        n, m, p, code, a, b = kernel.scan_entries(buf, seg.size, seg.base_offset, p, end, check_crc, out,
                                                  *ebuf.arrays())
        if n:
            recs, out = handed_over(out, n)
            yield recs, ebuf.batch(buf, recs, m)
        if code == KERNEL_JAVA_CHECK:  # one record for the Python rules to judge (rocketidx.commitlog.records)
            one, stop = check_records(buf, seg, np.array([p], np.int64), check_crc=check_crc)
            if stop is not None:
                return stop
            yield one, entries_from_records(buf, seg, one, native=False)
            p += int(one[0, L.REC_TOTAL])
            continue
        if code == KERNEL_MORE:
            if n == 0:  # one record has more keys than the entry buffers hold
                ebuf.grow(ebuf.capacity * 2)
            continue
        return kernel_stop(buf, seg, p, code, a, b)
