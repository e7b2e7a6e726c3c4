"""IndexFiles (+ CommitLog) -> index statistics: the numpy core that every Spark task calls.

In: one IndexFile at a time (a :class:`rocketidx.index.reader.FileRef`: path, sizes, and where it sits in
its window), its items and slot table read in chunks by :func:`rocketidx.index.reader.iter_items` and
:func:`rocketidx.index.reader.iter_slots`; for key-string statistics, message batches of
:data:`rocketidx.commitlog.columns.MESSAGE_SCHEMA`.
Out: small per-file summaries (:class:`FileScan`: the file's row, its chain-length histogram, longest
chains, slot occupancy per slot-table bin, entries and messages per time bucket), per-hash-partition
partial counts that a merge turns into global key-hash statistics.

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

The key-hash merges are in :mod:`rocketidx.stats.keys`, the sizing arithmetic in :mod:`rocketidx.stats.sizing`.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from rocketidx.commitlog.keys import slot_of
from rocketidx.errors import ConfigError, CorruptIndexError
from rocketidx.index.reader import CHUNK_ITEMS, FileRef, IndexFile, iter_items, iter_slots, read_exact
import rocketidx.layout as L
from rocketidx.output.manifest import Manifest
from rocketidx.output.open import open_index_dir
import rocketidx.storage as storage
from rocketidx.stats.keys import (DEFAULT_TOP, KeyCounts, commitlog_partials, hash_filter, hash_partition, in_hash_filter, merge_key_counts, merge_key_groups, split_key_counts, top_k)
from rocketidx.stats.sizing import (MS_PER_DAY, SizingTargets, expected_used_slots, files_per_day, predicted_mean_chain, round_up_nice, sizing_advice, slots_for_mean_chain)


DEFAULT_BINS = 256  # slot-table bins per file for the occupancy picture


def file_refs(index_dir: str | os.PathLike, hash_slot_num: int | None = None, index_num: int | None = None
              ) -> tuple[list[FileRef], Manifest | None]:
    """The files of an index directory (:func:`rocketidx.output.open.open_index_dir`), oldest first, as
    :class:`FileRef` with their window from the manifest, and the manifest (None for a bare directory).

    Each file is opened once (:class:`rocketidx.index.reader.IndexFile` checks size and header and raises
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
    """The file's :class:`rocketidx.index.reader.Header`, after the size and header checks."""
    return IndexFile(path, hash_slot_num, index_num).header


def chain_histogram(slot_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(length, slots)`` for every chain length >= 1 that occurs, ascending."""
    per_length = np.bincount(slot_counts)
    lengths = np.flatnonzero(per_length)
    lengths = lengths[lengths > 0]
    return lengths.astype(np.int64), per_length[lengths].astype(np.int64)


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
