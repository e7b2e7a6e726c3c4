"""Key-hash statistics across files and the CommitLog: per-hash-partition partial counts and their merge.

In: key hashes and counts from each file's scan (:mod:`rocketidx.stats.core`); message batches of
:data:`rocketidx.commitlog.columns.MESSAGE_SCHEMA` for key strings. Out: global key-hash counts
(:func:`merge_key_counts`: histogram, top hashes, a filter of hashes held twice or more) and, with the
CommitLog, distinct keys per hash (:func:`merge_key_groups`: true collisions, hot key names).
Stays true: partial counts travel as numpy blobs by hash partition, never one row per key; nothing here
loops in Python per key.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa


DEFAULT_TOP = 20
DEFAULT_FILTER_BITS = 27  # 2^27-bit (16 MiB) filter of the key hashes that can collide


def top_k(values: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, ties broken by the smaller key, in that order (values and
    keys are non-negative and below 2^31, so one int64 holds both and a partition finds them)."""
    k = min(k, len(values))
    if k <= 0:
        return np.zeros(0, np.int64)
    composite = ((2**31 - np.asarray(values, np.int64)) << 32) | np.asarray(keys, np.int64)
    pick = np.argpartition(composite, k - 1)[:k]
    return pick[np.argsort(composite[pick])]


def hash_partition(key_hash: np.ndarray, parts: int) -> np.ndarray:
    """Which of ``parts`` merge tasks owns a key hash (key hashes are >= 0, so ``%`` is the partition)."""
    return (np.asarray(key_hash, np.int64) % parts).astype(np.int32)


def split_key_counts(key_hashes: np.ndarray, key_counts: np.ndarray, parts: int, max_rows: int = 1 << 20
                     ) -> Iterator[tuple[int, bytes, bytes]]:
    """A file's distinct key hashes and entry counts cut by merge partition into ``(part, hashes, counts)``
    little-endian int32 blobs of at most ``max_rows`` hashes (blobs cross the shuffle with no per-key
    row cost)."""
    part = hash_partition(key_hashes, parts)
    order = np.argsort(part, kind="stable")
    p_sorted = part[order]
    cuts = np.searchsorted(p_sorted, np.arange(parts + 1))
    for p in range(parts):
        idx = order[cuts[p]:cuts[p + 1]]
        for a in range(0, len(idx), max_rows):
            sel = idx[a:a + max_rows]
            yield p, key_hashes[sel].astype("<i4").tobytes(), key_counts[sel].astype("<i4").tobytes()


@dataclass
class KeyCounts:
    """One merge partition's exact global counts."""

    multiplicity: dict  # entries_per_hash, key_hashes (arrays): how many hashes have n entries
    top: list[dict]  # key_hash, entries, files; most entries first
    repeated: np.ndarray  # hashes with >= 2 entries: only these can hide a true collision
    distinct_hashes: int
    entries: int


def merge_key_counts(hash_blobs: list[bytes], count_blobs: list[bytes], top: int = DEFAULT_TOP) -> KeyCounts:
    """Merge per-file partial counts of one hash partition: entries per hash, over every file."""
    h = np.concatenate([np.frombuffer(b, "<i4") for b in hash_blobs]) if hash_blobs else np.zeros(0, np.int32)
    n = np.concatenate([np.frombuffer(b, "<i4") for b in count_blobs]) if count_blobs else np.zeros(0, np.int32)
    if len(h) == 0:
        return KeyCounts({"entries_per_hash": np.zeros(0, np.int64), "key_hashes": np.zeros(0, np.int64)},
                         [], np.zeros(0, np.int32), 0, 0)
    # One sort of (hash, count) packed in an int64 moves both together: cheaper than argsort + gathers.
    # The per-file blobs arrive as sorted runs, which a stable (merge) sort exploits.
    packed = np.sort((h.astype(np.int64) << 32) | n.astype(np.int64), kind="stable")
    h, n = (packed >> 32).astype(np.int32), packed & 0xFFFFFFFF
    starts = np.flatnonzero(np.concatenate(([True], h[1:] != h[:-1])))
    hashes = h[starts]
    totals = np.add.reduceat(n, starts)
    files = np.diff(np.append(starts, len(h)))  # each file contributes one partial per hash it holds
    if int(totals.max()) <= 4 * len(totals) + 1024:  # entry counts are small: counting beats sorting
        per_total = np.bincount(totals)
        mult = np.flatnonzero(per_total)
        per = per_total[mult]
    else:  # one very hot key: do not allocate a counter per possible count
        mult, per = np.unique(totals, return_counts=True)
    sel = top_k(totals, hashes, top)
    top_rows = [{"key_hash": int(a), "entries": int(b), "files": int(c)}
                for a, b, c in zip(hashes[sel].tolist(), totals[sel].tolist(), files[sel].tolist())]
    return KeyCounts({"entries_per_hash": mult.astype(np.int64), "key_hashes": per.astype(np.int64)},
                     top_rows, hashes[totals >= 2].astype(np.int32), len(hashes), int(totals.sum()))


def hash_filter(hashes: np.ndarray, bits: int = DEFAULT_FILTER_BITS) -> np.ndarray:
    """A ``2^bits``-bit set of the hashes' low bits, packed in uint8: membership is exact for the hashes
    given and wrong (a false "maybe") for about ``len(hashes) / 2^bits`` of the others."""
    f = np.zeros(1 << (bits - 3), np.uint8)
    low = np.asarray(hashes, np.int64) & ((1 << bits) - 1)
    np.bitwise_or.at(f, low >> 3, (1 << (low & 7)).astype(np.uint8))
    return f


def in_hash_filter(f: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    bits = int(len(f)).bit_length() - 1 + 3
    low = np.asarray(hashes, np.int64) & ((1 << bits) - 1)
    return (f[low >> 3] >> (low & 7)) & 1 == 1


KEY_ROWS = pa.schema([("key_hash", pa.int32()), ("key", pa.string()), ("entries", pa.int64())])
TOPIC_BUCKET_ROWS = pa.schema([("topic", pa.string()), ("bucket_start_ms", pa.int64()), ("messages", pa.int64()),
                               ("indexed_messages", pa.int64()), ("entries", pa.int64())])


def commitlog_partials(batch: pa.RecordBatch | pa.Table, *, bucket_ms: int, key_filter: np.ndarray | None,
                       phy_range: tuple[int, int] | None = None) -> tuple[pa.Table, pa.Table]:
    """Per ``(topic, bucket)`` message and entry counts of a message batch, and its entry keys
    ``(key_hash, "topic#key", entries)`` for the key hashes the filter may hold (all when it is None).

    ``phy_range`` (inclusive) keeps only the messages the index covers.
    """
    from rocketidx.commitlog.entries import extract_entry_keys
    from rocketidx.commitlog.keys import key_hash
    if phy_range is not None:
        phy = batch.column("phy_offset").to_numpy()
        keep = (phy >= phy_range[0]) & (phy <= phy_range[1])
        if not keep.all():
            batch = batch.filter(pa.array(keep))
    rows, seq, keys = extract_entry_keys(batch)
    topic = batch.column("topic")
    ts = batch.column("store_timestamp_ms").to_numpy()
    msg_bucket = np.floor_divide(ts, bucket_ms) * bucket_ms
    per_msg = np.bincount(rows, minlength=batch.num_rows) if len(rows) else np.zeros(batch.num_rows, np.int64)
    msgs = pa.table({"topic": topic, "bucket_start_ms": pa.array(msg_bucket, pa.int64()),
                     "indexed": pa.array((per_msg > 0).astype(np.int64)),
                     "entries": pa.array(per_msg.astype(np.int64))})
    tb = msgs.group_by(["topic", "bucket_start_ms"]).aggregate(
        [("indexed", "count"), ("indexed", "sum"), ("entries", "sum")])
    tb = pa.table([tb["topic"], tb["bucket_start_ms"], tb["indexed_count"], tb["indexed_sum"], tb["entries_sum"]],
                  schema=TOPIC_BUCKET_ROWS)
    kh = key_hash(keys)
    want = in_hash_filter(key_filter, kh) if key_filter is not None else np.ones(len(kh), bool)
    kt = pa.table({"key_hash": pa.array(kh[want]), "key": keys.filter(pa.array(want))})
    kt = kt.group_by(["key_hash", "key"]).aggregate([("key", "count")])
    kt = pa.table([kt["key_hash"], kt["key"], kt["key_count"]], schema=KEY_ROWS)
    return tb, kt


def merge_key_groups(tables: list[pa.Table], wanted: set[int] | None = None, examples: int = 5) -> tuple[dict, list[dict]]:
    """Merge ``KEY_ROWS`` tables of one hash partition into per-hash key groups.

    Returns totals (``hashes``, ``keys``, ``entries``, and ``colliding_hashes``/``colliding_keys``/
    ``colliding_entries`` of the hashes shared by two or more distinct keys) and one group per hash that
    either collides or is in ``wanted`` (hot keys to name): ``key_hash``, ``distinct_keys``, ``entries``,
    ``keys``/``key_entries`` (the ``examples`` keys with most entries).
    """
    t = pa.concat_tables(tables) if tables else KEY_ROWS.empty_table()
    t = t.group_by(["key_hash", "key"]).aggregate([("entries", "sum")])
    # By hash, then most entries first, then by key: the examples shown do not depend on task order.
    t = t.sort_by([("key_hash", "ascending"), ("entries_sum", "descending"), ("key", "ascending")])
    kh = t["key_hash"].to_numpy()
    n = t["entries_sum"].to_numpy().astype(np.int64)
    keys = t["key"]
    totals = {"hashes": 0, "keys": len(kh), "entries": int(n.sum()), "colliding_hashes": 0, "colliding_keys": 0,
              "colliding_entries": 0}
    if len(kh) == 0:
        return totals, []
    starts = np.flatnonzero(np.concatenate(([True], kh[1:] != kh[:-1])))
    sizes = np.diff(np.append(starts, len(kh)))
    group_entries = np.add.reduceat(n, starts)
    totals["hashes"] = len(starts)
    coll = sizes >= 2
    totals["colliding_hashes"] = int(coll.sum())
    totals["colliding_keys"] = int(sizes[coll].sum())
    totals["colliding_entries"] = int(group_entries[coll].sum())
    pick = coll | (np.isin(kh[starts], np.fromiter(wanted, np.int64)) if wanted else False)
    groups = []
    for g in np.flatnonzero(pick).tolist():  # one iteration per reported group: collisions and hot keys
        a, m = int(starts[g]), int(min(sizes[g], examples))
        groups.append({"key_hash": int(kh[a]), "distinct_keys": int(sizes[g]), "entries": int(group_entries[g]),
                       "keys": keys.slice(a, m).to_pylist(), "key_entries": n[a:a + m].tolist()})
    return totals, groups
