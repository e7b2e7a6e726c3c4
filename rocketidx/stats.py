"""IndexFiles (+ CommitLog) -> index statistics: the numpy core that every Spark task calls.

In: one IndexFile at a time (a :class:`rocketidx.indexfile.FileRef`: path, sizes, and where it sits in
its window), its items and slot table read in chunks by :func:`rocketidx.indexfile.iter_items` and
:func:`rocketidx.indexfile.iter_slots`; for key-string statistics, message batches of
:data:`rocketidx.messages.MESSAGE_SCHEMA`.
Out: small per-file summaries (:class:`FileScan`: the file's row, its chain-length histogram, longest
chains, slot occupancy per slot-table bin, entries and messages per time bucket), per-hash-partition
partial counts that a merge turns into global key-hash statistics (:func:`merge_key_counts`,
:func:`merge_key_groups`), and the sizing arithmetic (:func:`sizing_advice`).

Stays true:
* memory per call is bounded by the file's sizes, never by the store: one chunk of items, plus
  ``4 B x hash_slot_num`` slot counts and ``4 B x entries`` key hashes (100 MB at the broker's defaults);
* a chain's length is the number of items on a slot's ``prev_index`` chain. In a file ``rocketidx verify``
  passes, every item whose ``key_hash % hash_slot_num`` is ``s`` lies on slot ``s``'s chain (``putKey`` links
  each item to the previous head of its slot), so the chain lengths are one ``bincount`` of item slots;
  the tests check that against a literal walk of the links;
* an item's time is ``begin_timestamp + time_diff_s * 1000``, the broker's own reconstruction
  (``IndexFile.selectPhyOffset``): 1 s resolution; the first item of a rolled-over file keeps the diff
  measured from the seeded begin, added to the file's own begin, exactly as queries compute it.
  Statistics from the CommitLog use the exact store timestamps instead;
* a message's entries are consecutive items (one timestamp, one window), so "messages" counts the items
  whose ``phy_offset`` differs from the previous item's, the previous file's last item included when the
  file continues a full one;
* nothing here loops in Python per item or per key.

Sizing formulas (:func:`sizing_advice`), for ``n`` entries per file holding ``d`` distinct key hashes over
``S`` slots, assuming hashes spread uniformly over slots (the slot-occupancy statistics show whether they
do): expected used slots ``U = S * (1 - (1 - 1/S)^d)``; mean chain length over used slots ``n / U``,
never below ``n / d`` (repeated keys share a chain whatever ``S`` is); a window with ``w`` entries needs
``ceil(w / (index_num - 1))`` files, so files per day is that sum over the observed windows scaled to a
day (``w / (index_num - 1)`` per day for one unwindowed sequence, as a broker writes).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from rocketidx import layout as L
from rocketidx import storage
from rocketidx.errors import ConfigError, CorruptIndexError
from rocketidx.indexfile import CHUNK_ITEMS, FileRef, IndexFile, iter_items, iter_slots, open_index_dir, read_exact
from rocketidx.manifest import Manifest
from rocketidx.keys import slot_of

DEFAULT_TOP = 20
DEFAULT_BINS = 256  # slot-table bins per file for the occupancy picture
MS_PER_DAY = 86_400_000
DEFAULT_FILTER_BITS = 27  # 2^27-bit (16 MiB) filter of the key hashes that can collide


# --- reading --------------------------------------------------------------------------------------

def file_refs(index_dir: str | os.PathLike, hash_slot_num: int | None = None, index_num: int | None = None
              ) -> tuple[list[FileRef], Manifest | None]:
    """The files of an index directory (:func:`rocketidx.indexfile.open_index_dir`), oldest first, as
    :class:`FileRef` with their window from the manifest, and the manifest (None for a bare directory).

    Each file is opened once (:class:`rocketidx.indexfile.IndexFile` checks size and header and raises
    :class:`CorruptIndexError` naming the file); only the 40-byte headers are read here.
    """
    d = open_index_dir(index_dir, hash_slot_num, index_num)
    files = d.open()
    manifest = d.manifest
    rows = manifest.files if manifest is not None else [None] * len(files)  # the files are the manifest's
    refs: list[FileRef] = []
    for i, (f, row) in enumerate(zip(files, rows)):
        continues = -1
        if i > 0:
            prev = files[i - 1]
            same_sequence = manifest is None or rows[i - 1].window_id == row.window_id
            if same_sequence and prev.header.index_count > L.FIRST_INDEX:
                continues = prev.header.end_phy_offset
        refs.append(FileRef(f.path, f.hash_slot_num, f.index_num, i, *(
            (row.window_id, row.window_start_ms, row.seq) if row is not None else (None, None, None)), continues))
    return refs, manifest


def read_header(path: str, hash_slot_num: int, index_num: int):
    """The file's :class:`rocketidx.indexfile.Header`, after the size and header checks."""
    return IndexFile(path, hash_slot_num, index_num).header


# --- chains ---------------------------------------------------------------------------------------

def chain_histogram(slot_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(length, slots)`` for every chain length >= 1 that occurs, ascending."""
    per_length = np.bincount(slot_counts)
    lengths = np.flatnonzero(per_length)
    lengths = lengths[lengths > 0]
    return lengths.astype(np.int64), per_length[lengths].astype(np.int64)


def top_k(values: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, ties broken by the smaller key, in that order (values and
    keys are non-negative and below 2^31, so one int64 holds both and a partition finds them)."""
    k = min(k, len(values))
    if k <= 0:
        return np.zeros(0, np.int64)
    composite = ((2**31 - np.asarray(values, np.int64)) << 32) | np.asarray(keys, np.int64)
    pick = np.argpartition(composite, k - 1)[:k]
    return pick[np.argsort(composite[pick])]


def histogram_percentiles(values: np.ndarray, counts: np.ndarray, qs=(50, 90, 99)) -> list[int]:
    """Nearest-rank percentiles of a histogram: the smallest value with at least q% of the mass at or
    below it (0 when the histogram is empty)."""
    values, counts = np.asarray(values), np.asarray(counts, np.int64)
    total = int(counts.sum())
    if total == 0:
        return [0 for _ in qs]
    cum = np.cumsum(counts)
    ranks = [max(1, math.ceil(q / 100 * total)) for q in qs]
    return [int(values[np.searchsorted(cum, r)]) for r in ranks]


def expected_used_slots(distinct_hashes, hash_slot_num):
    """``S * (1 - (1 - 1/S)^d)``: slots hit by ``d`` hashes spread uniformly over ``S`` slots."""
    d = np.asarray(distinct_hashes, np.float64)
    s = np.asarray(hash_slot_num, np.float64)
    return s * -np.expm1(d * np.log1p(-1.0 / s))  # expm1/log1p: exact where 1/S is tiny


# --- one file -------------------------------------------------------------------------------------

@dataclass
class FileScan:
    """Everything one pass over one file yields (all small but ``key_hashes``/``key_counts``)."""

    row: dict
    chain_lengths: np.ndarray  # histogram over slots with at least one item
    chain_slots: np.ndarray
    longest: list[dict]  # slot, length, distinct_hashes, head_item; longest first
    bins: dict  # bin, first_slot, slots, used_slots, entries (arrays)
    buckets: dict  # bucket_start_ms, entries, messages (arrays)
    key_hashes: np.ndarray  # the file's distinct key hashes, ascending
    key_counts: np.ndarray  # entries per distinct key hash


def _file_stat(path: str) -> tuple[int, int]:
    return storage.footprint(path)


def scan_file(ref: FileRef, *, bucket_ms: int, top: int = DEFAULT_TOP, bins: int = DEFAULT_BINS,
              chunk: int = CHUNK_ITEMS) -> FileScan:
    """One pass over a file's slot table and items; see :class:`FileScan`."""
    if bucket_ms <= 0:
        raise ConfigError("bucket_ms", bucket_ms, "must be positive")
    S, N = ref.hash_slot_num, ref.index_num
    h = read_header(ref.path, S, N)
    count = h.index_count
    entries = count - L.FIRST_INDEX

    # Slot table: non-empty heads the broker would follow (``selectPhyOffset`` ignores values <= 0 or
    # > indexCount), counted per slot-table bin.
    bins = max(1, min(bins, S))
    edges = (np.arange(bins + 1, dtype=np.int64) * S) // bins
    used_per_bin = np.zeros(bins, np.int64)
    for a, slots in iter_slots(ref.path, S):
        v = slots.astype(np.int32)
        live = np.flatnonzero((v > L.INVALID_INDEX) & (v <= count)) + a
        used_per_bin += np.bincount(np.searchsorted(edges, live, side="right") - 1, minlength=bins)
    used_slots = int(used_per_bin.sum())

    slot_counts = np.zeros(S, np.int32)  # a chain never exceeds index_num < 2^31 items
    key_hashes = np.empty(entries, np.int32)
    bucket_keys, bucket_entries, bucket_messages = [], [], []
    prev_phy = ref.continues_phy
    items_at = L.items_offset(S)
    kh_at = L.INDEX_ITEM.fields["key_hash"][1]
    for a, items in iter_items(ref.path, S, L.FIRST_INDEX, count, chunk):
        kh = items["key_hash"].astype(np.int32)
        bad = np.flatnonzero(kh < 0)
        if len(bad):
            raise CorruptIndexError(ref.path, items_at + (a + int(bad[0])) * L.INDEX_ITEM.itemsize + kh_at,
                                    f"item {a + int(bad[0])} has negative keyHash {int(kh[bad[0]])} (abs() of a "
                                    "Java hash never is); run rocketidx verify")
        slot_counts += np.bincount(slot_of(kh, S), minlength=S)
        key_hashes[a - L.FIRST_INDEX:a - L.FIRST_INDEX + len(kh)] = kh
        phy = items["phy_offset"].astype(np.int64)
        first = np.empty(len(phy), bool)
        first[0] = phy[0] != prev_phy
        np.not_equal(phy[1:], phy[:-1], out=first[1:])
        prev_phy = int(phy[-1])
        t = h.begin_timestamp + items["time_diff_s"].astype(np.int64) * 1000
        b = np.floor_divide(t, bucket_ms)
        b0, b1 = int(b.min()), int(b.max())
        if b1 - b0 <= 4 * len(b) + 1024:  # the usual short range (a file spans a window): no sort
            idx, ids = b - b0, np.arange(b0, b1 + 1)
        else:  # time diffs far apart (clamped or damaged): do not allocate the whole range
            ids, idx = np.unique(b, return_inverse=True)
        bucket_keys.append(ids)
        bucket_entries.append(np.bincount(idx, minlength=len(ids)))
        bucket_messages.append(np.bincount(idx, weights=first, minlength=len(ids)).astype(np.int64))

    if bucket_keys:
        keys, inv = np.unique(np.concatenate(bucket_keys), return_inverse=True)
        b_entries = np.bincount(inv, weights=np.concatenate(bucket_entries)).astype(np.int64)
        b_messages = np.bincount(inv, weights=np.concatenate(bucket_messages)).astype(np.int64)
        seen = b_entries > 0
        keys, b_entries, b_messages = keys[seen], b_entries[seen], b_messages[seen]
    else:
        keys = b_entries = b_messages = np.zeros(0, np.int64)

    # From here on only the slots that hold items matter: compact them once.
    chained_slots = np.flatnonzero(slot_counts)
    chain_len = slot_counts[chained_slots]
    lengths, slots_at = chain_histogram(chain_len)
    p50, p90, p99 = histogram_percentiles(lengths, slots_at)
    chained = len(chained_slots)
    uniq, per_hash = np.unique(key_hashes, return_counts=True)
    distinct = len(uniq)

    k = min(top, chained)
    longest: list[dict] = []
    if k:
        cand = chained_slots[top_k(chain_len, chained_slots, k)]  # longest first, then by slot
        on_top = np.isin(slot_of(key_hashes, S), cand)
        top_kh = key_hashes[on_top]
        top_slot = slot_of(top_kh, S)
        pairs = np.unique(np.stack([top_slot.astype(np.int64), top_kh.astype(np.int64)]), axis=1)
        hashes_on = dict(zip(*np.unique(pairs[0], return_counts=True)))
        heads = _slot_values(ref.path, cand)
        longest = [{"slot": int(s), "length": int(slot_counts[s]), "distinct_hashes": int(hashes_on.get(s, 0)),
                    "head_item": int(hd)} for s, hd in zip(cand.tolist(), heads.tolist())]

    disk, apparent = _file_stat(ref.path)
    sum_sq = float(np.dot(lengths.astype(np.float64) ** 2, slots_at))
    row = {
        "file": ref.file_index, "name": ref.name, "window_id": ref.window_id,
        "window_start_ms": ref.window_start_ms, "seq": ref.seq,
        "begin_timestamp": h.begin_timestamp, "end_timestamp": h.end_timestamp,
        "begin_phy_offset": h.begin_phy_offset, "end_phy_offset": h.end_phy_offset,
        "hash_slot_count": h.hash_slot_count, "index_count": h.index_count,
        "hash_slot_num": S, "index_num": N, "entries": entries,
        "fill_ratio": entries / (N - L.FIRST_INDEX),
        "used_slots": used_slots,
        "load_factor": entries / S,  # the chain a query for an absent key walks, on average
        "slot_usage": used_slots / S,
        "expected_used_slots": float(expected_used_slots(distinct, S)),
        "mean_chain": entries / chained if chained else 0.0,
        # A query for a present key, drawn like the traffic, walks its whole slot's chain: sum L^2 / n.
        "mean_walk": sum_sq / entries if entries else 0.0,
        "p50_chain": p50, "p90_chain": p90, "p99_chain": p99,
        "max_chain": int(lengths[-1]) if len(lengths) else 0,
        "distinct_hashes": distinct,
        "entries_per_hash": entries / distinct if distinct else 0.0,
        "messages": int(b_messages.sum()),
        "disk_bytes": disk, "apparent_bytes": apparent,
    }
    bin_entries = np.add.reduceat(slot_counts, edges[:-1]) if S else np.zeros(0, np.int64)
    return FileScan(
        row=row, chain_lengths=lengths, chain_slots=slots_at, longest=longest,
        bins={"bin": np.arange(bins, dtype=np.int32), "first_slot": edges[:-1], "slots": np.diff(edges),
              "used_slots": used_per_bin, "entries": bin_entries.astype(np.int64)},
        buckets={"bucket_start_ms": keys * bucket_ms, "entries": b_entries, "messages": b_messages},
        key_hashes=uniq, key_counts=per_hash.astype(np.int32))


def _slot_values(path: str, slots: np.ndarray) -> np.ndarray:
    """The slot-table values (chain heads) of a few slots, one positional read each."""
    out = np.empty(len(slots), np.int64)
    with storage.RangeFile(path) as f:
        for i, s in enumerate(slots.tolist()):
            raw = read_exact(f, L.SLOT.itemsize, L.slots_offset() + s * L.SLOT.itemsize)
            out[i] = int(np.frombuffer(raw, L.SLOT)[0])
    return out


# --- key hashes across files ----------------------------------------------------------------------

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


# --- the CommitLog side: key strings --------------------------------------------------------------

KEY_ROWS = pa.schema([("key_hash", pa.int32()), ("key", pa.string()), ("entries", pa.int64())])
TOPIC_BUCKET_ROWS = pa.schema([("topic", pa.string()), ("bucket_start_ms", pa.int64()), ("messages", pa.int64()),
                               ("indexed_messages", pa.int64()), ("entries", pa.int64())])


def commitlog_partials(batch: pa.RecordBatch | pa.Table, *, bucket_ms: int, key_filter: np.ndarray | None,
                       phy_range: tuple[int, int] | None = None) -> tuple[pa.Table, pa.Table]:
    """Per ``(topic, bucket)`` message and entry counts of a message batch, and its entry keys
    ``(key_hash, "topic#key", entries)`` for the key hashes the filter may hold (all when it is None).

    ``phy_range`` (inclusive) keeps only the messages the index covers.
    """
    from rocketidx.entries import extract_entry_keys
    from rocketidx.keys import key_hash
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


# --- sizing ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SizingTargets:
    """What the advice aims for: mean chain length over used slots in the fullest file, files per day,
    and a headroom factor on the observed peak traffic."""

    mean_chain: float = 1.5
    files_per_day: float = 24.0
    headroom: float = 2.0

    def __post_init__(self) -> None:
        if not self.mean_chain >= 1.0:
            raise ConfigError("target_mean_chain", self.mean_chain, "must be >= 1 (a used slot holds at least one item)")
        if not self.files_per_day > 0:
            raise ConfigError("target_files_per_day", self.files_per_day, "must be positive")
        if not self.headroom >= 1.0:
            raise ConfigError("headroom", self.headroom, "must be >= 1")


def predicted_mean_chain(entries: float, distinct: float, hash_slot_num: int) -> float:
    if entries <= 0:
        return 0.0
    return float(entries / expected_used_slots(distinct, hash_slot_num))


def slots_for_mean_chain(entries: float, distinct: float, target: float) -> int | None:
    """Smallest slot count whose predicted mean chain is <= target; None when repeated keys alone
    (``entries / distinct``) exceed it. Bisection: the prediction falls as slots grow."""
    if entries <= 0:
        return 1
    if predicted_mean_chain(entries, distinct, 2**31 - 1) > target:
        return None
    lo, hi = 1, 2**31 - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if predicted_mean_chain(entries, distinct, mid) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def files_per_day(window_entries: np.ndarray, index_num: int, span_ms: float, windowed: bool) -> float:
    """Files a day for this traffic: whole files per window (windowed), or one continuous sequence."""
    w = np.asarray(window_entries, np.float64)
    cap = index_num - L.FIRST_INDEX
    files = np.ceil(w / cap).sum() if windowed else w.sum() / cap
    return float(files * MS_PER_DAY / span_ms)


def round_up_nice(x: float) -> int:
    """Up to two significant digits: 1,234,567 -> 1,300,000 (sizes people can read and type)."""
    if x <= 10:
        return int(math.ceil(x))
    e = 10 ** (int(math.floor(math.log10(x))) - 1)
    return int(math.ceil(x / e) * e)


def _index_num_for(window_entries: np.ndarray, span_ms: float, windowed: bool, target: float, max_index_num: int
                   ) -> int | None:
    """Smallest index_num giving at most ``target`` files a day, or None when no size can (windowed:
    there are more windows a day than that). Bisection: files per day fall as index_num grows."""
    ok = lambda i: files_per_day(window_entries, i, span_ms, windowed) <= target * (1 + 1e-9)  # noqa: E731
    lo, hi = L.FIRST_INDEX + 1, max_index_num
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def sizing_advice(window_entries, span_ms: float, windowed: bool, entries_per_hash: float,
                  current: tuple[int, int], targets: SizingTargets = SizingTargets(),
                  observed: dict | None = None) -> list[dict]:
    """Rows for the sizing table: as built, advised for the targets, and the broker's defaults.

    ``window_entries``: entries of each observed window (one value for a single sequence);
    ``span_ms``: the time those entries cover (whole windows for a windowed build); ``entries_per_hash``:
    entries / distinct key hashes per file, observed (repeated keys do not spread over slots);
    ``observed``: measured values for the as-built row (``mean_chain``, ``files_per_day``).
    """
    from rocketidx.config import MAX_INDEX_FILE_BYTES
    w = np.asarray(window_entries, np.float64)
    span_ms = max(float(span_ms), 60_000.0)  # under a minute of data says nothing per day
    r = max(1.0, float(entries_per_hash))
    peak = float(w.max()) if len(w) else 0.0
    grown = w * targets.headroom
    notes: list[str] = []

    def row(scenario: str, S: int, I: int, traffic: np.ndarray, note: str = "") -> dict:
        n_file = min(I - L.FIRST_INDEX, float(traffic.max()) if len(traffic) else 0.0)
        size = L.index_file_size(S, I)
        out = {"scenario": scenario, "hash_slot_num": S, "index_num": I, "file_bytes": size,
               "entries_per_file": int(round(n_file)),
               "predicted_used_slots": int(round(float(expected_used_slots(n_file / r, S)))),
               "predicted_mean_chain": round(predicted_mean_chain(n_file, n_file / r, S), 3),
               "predicted_load_factor": round(n_file / S, 3),
               "predicted_files_per_day": round(files_per_day(traffic, I, span_ms, windowed), 2),
               "observed_mean_chain": None, "observed_files_per_day": None,
               "target_mean_chain": targets.mean_chain, "target_files_per_day": targets.files_per_day,
               "fits_2gib": size <= MAX_INDEX_FILE_BYTES, "note": note}
        return out

    max_i = (MAX_INDEX_FILE_BYTES - L.index_file_size(1, 0)) // L.INDEX_ITEM.itemsize
    raw_i = _index_num_for(grown, span_ms, windowed, targets.files_per_day, max_i)
    if raw_i is None:
        raw_i = min(max_i, int(math.ceil(peak * targets.headroom)) + L.FIRST_INDEX)
        notes.append(f"more windows a day than {targets.files_per_day:g} files: sized for one file per window")
    index_num = min(max(round_up_nice(raw_i), L.FIRST_INDEX + 1), max_i)
    n_file = min(index_num - L.FIRST_INDEX, peak * targets.headroom)
    target = targets.mean_chain
    slots = slots_for_mean_chain(n_file, n_file / r, target)
    if slots is None:
        target = r * 1.25
        notes.append(f"repeated keys alone give chains of {r:.2f}; aimed at {target:.2f}")
        slots = slots_for_mean_chain(n_file, n_file / r, target) or 1
    slots = round_up_nice(slots)
    max_slots = (MAX_INDEX_FILE_BYTES - L.index_file_size(0, index_num)) // L.SLOT.itemsize
    if slots > max_slots:
        slots = max_slots
        notes.append("slots capped so that the file stays under 2 GiB")
    built = row("as built", *current, w)
    if observed:
        built.update({f"observed_{k}": v for k, v in observed.items()})
    return [built,
            row("advised", slots, index_num, grown, "; ".join(notes)),
            row("broker default", L.DEFAULT_HASH_SLOT_NUM, L.DEFAULT_INDEX_NUM, grown)]


def auto_bucket_ms(span_ms: int, target_buckets: int = 96) -> int:
    """A readable bucket length giving about ``target_buckets`` buckets over the span."""
    nice = [60_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000,
            43_200_000, MS_PER_DAY, 7 * MS_PER_DAY]
    for b in nice:
        if span_ms / b <= target_buckets:
            return b
    return nice[-1]


__all__ = ["FileScan", "KeyCounts", "SizingTargets", "auto_bucket_ms", "chain_histogram",
           "commitlog_partials", "expected_used_slots", "file_refs", "files_per_day", "hash_filter",
           "hash_partition", "histogram_percentiles", "in_hash_filter",
           "merge_key_counts", "merge_key_groups", "predicted_mean_chain", "round_up_nice", "scan_file",
           "sizing_advice", "slots_for_mean_chain", "split_key_counts"]
