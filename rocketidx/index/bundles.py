"""Entries -> bundles: a window's messages of one decoded batch, packed as fixed-width columns.

In: an entries batch (:data:`rocketidx.commitlog.entries.ENTRY_SCHEMA`, in CommitLog order) and the window length.
Out: :data:`BUNDLE_ROWS` rows, one per window present in the batch, holding that window's messages in
CommitLog order (offsets, store times, entry counts, then every entry's key hash in entry order); and
:class:`Bundle` values unpacked from such rows, which give the entries back.

Why: an engine that moves rows pays per row (Arrow -> rows, shuffle, sort, rows -> Arrow); on the 5.7 GB
bench store, a row per message cost twice the whole core build's CPU on Spark. A bundle carries the
same fixed-width values in one row; bundles of one window never overlap in offsets, so ordering them
by (window, first offset) keeps every window's entries in CommitLog order. The offsets that order and
cut are the records' own; a PHYSICALOFFSET field that is not (damage the broker indexes as it is) travels
beside it, and is what the entries carry. Key strings never leave the
reading process.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rocketidx.arrays import numpy_of
from rocketidx.index.windows import assign_windows

BUNDLE_ROWS = pa.schema([
    ("window", pa.int64()),
    ("phy_offset", pa.int64()),  # the CommitLog offset of the bundle's first message: the sort key
    ("messages", pa.int32()),
    ("phy_offsets", pa.binary()),  # int64 little-endian, one per message: its PHYSICALOFFSET field
    ("store_timestamps_ms", pa.binary()),  # int64 little-endian, one per message
    ("entry_counts", pa.binary()),  # int32 little-endian, one per message (each makes at least one)
    ("key_hashes", pa.binary()),  # int32 little-endian, one per entry, in entry order
    # int64 little-endian, one per message: its CommitLog offset; null when every field is its offset
    ("positions", pa.binary()),
])


def pack_bundles(entries: pa.RecordBatch, window_ms: int, positions: np.ndarray | None = None) -> dict[str, list]:
    """The bundle rows of one batch of entries, as columns of :data:`BUNDLE_ROWS` (one row per window).

    ``positions``: each entry's record offset where it differs from the entries' ``phy_offset`` (a
    PHYSICALOFFSET field that lies, :func:`rocketidx.commitlog.entries.entry_positions`); messages are told apart,
    ordered and cut by it, and indexed by the field, as ``buildIndex`` does."""
    phy_e = numpy_of(entries.column("phy_offset"))
    at_e = phy_e if positions is None else np.asarray(positions, np.int64)
    # A message's entries are adjacent and share its record (its first may have been skipped).
    firsts = np.flatnonzero(np.concatenate(([True], at_e[1:] != at_e[:-1]))) if len(at_e) else at_e[:0]
    rows: dict[str, list] = {f.name: [] for f in BUNDLE_ROWS}
    n = len(firsts)
    if n == 0:
        return rows
    hashes = numpy_of(entries.column("key_hash")).astype("<i4", copy=False)
    phy = phy_e[firsts].astype("<i8", copy=False)
    at = at_e[firsts].astype("<i8", copy=False)
    ts = numpy_of(entries.column("store_timestamp_ms"))[firsts].astype("<i8", copy=False)
    counts = np.diff(np.append(firsts, len(hashes))).astype("<i4")
    msg_window = assign_windows(ts, window_ms)
    if msg_window[0] == msg_window[-1] and (msg_window == msg_window[0]).all():  # the usual case
        groups = [np.arange(n)]
    else:
        order = np.argsort(msg_window, kind="stable")
        groups = np.split(order, np.flatnonzero(np.diff(msg_window[order])) + 1)
    for g in groups:
        rows["window"].append(int(msg_window[g[0]]))
        rows["phy_offset"].append(int(at[g[0]]))
        rows["messages"].append(len(g))
        rows["phy_offsets"].append(phy[g].tobytes())
        rows["positions"].append(None if positions is None else at[g].tobytes())
        rows["store_timestamps_ms"].append(ts[g].tobytes())
        rows["entry_counts"].append(counts[g].tobytes())
        rows["key_hashes"].append(hashes[entry_indices(firsts[g], counts[g])].tobytes())
    return rows


def entry_indices(starts, counts):
    """The indices ``start, start+1, .., start+count-1`` of every (start, count), concatenated."""
    total = int(counts.sum())
    if len(starts) and starts[-1] + counts[-1] - starts[0] == total:  # contiguous: one slice
        return np.arange(starts[0], starts[0] + total)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return offsets + np.arange(total)


@dataclass(frozen=True)
class Bundle:
    """One bundle row unpacked: a window's messages (numpy arrays) and their entries' key hashes."""

    window: int
    phy_offsets: np.ndarray  # int64 per message
    store_timestamps_ms: np.ndarray  # int64 per message
    entry_counts: np.ndarray  # int32 per message
    key_hashes: np.ndarray  # int32 per entry
    lying: np.ndarray | None = None  # int64 per message: CommitLog offsets, where a field is not one

    @classmethod
    def from_row(cls, window: int, phy: bytes, ts: bytes, counts: bytes, hashes: bytes,
                 positions: bytes | None = None) -> "Bundle":
        return cls(window, np.frombuffer(phy, "<i8"), np.frombuffer(ts, "<i8"), np.frombuffer(counts, "<i4"),
                   np.frombuffer(hashes, "<i4"), None if positions is None else np.frombuffer(positions, "<i8"))

    @property
    def positions(self) -> np.ndarray:
        """Each message's CommitLog offset (what the broker's recovery cuts by)."""
        return self.phy_offsets if self.lying is None else self.lying

    def entries(self, keep=None):
        """``(phy_offset, key_hash, store_timestamp_ms)`` per entry, for the messages ``keep`` selects."""
        phy, ts, counts, hashes = self.phy_offsets, self.store_timestamps_ms, self.entry_counts, self.key_hashes
        if keep is not None and not keep.all():
            starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
            hashes = hashes[entry_indices(starts[keep], counts[keep])]
            phy, ts, counts = phy[keep], ts[keep], counts[keep]
        return np.repeat(phy, counts), hashes, np.repeat(ts, counts)

    def entry_positions(self, keep=None) -> np.ndarray | None:
        """Each entry's CommitLog offset, for the messages ``keep`` selects, where a field lies (else None:
        the entries' ``phy_offset`` is it)."""
        if self.lying is None:
            return None
        at, counts = self.lying, self.entry_counts
        if keep is not None and not keep.all():
            at, counts = at[keep], counts[keep]
        return np.repeat(at, counts)


def iter_bundles(batch: pa.RecordBatch):
    """The bundle rows of a batch holding :data:`BUNDLE_ROWS` columns (rows whose window is null, such as
    a shuffle's info rows, are skipped), as :class:`Bundle` values."""
    cols = [batch.column(c).to_pylist() for c in ("window", "phy_offsets", "store_timestamps_ms",
                                                   "entry_counts", "key_hashes", "positions")]
    for w, phy, ts, counts, hashes, positions in zip(*cols):
        if w is not None:
            yield Bundle.from_row(w, phy, ts, counts, hashes, positions)
