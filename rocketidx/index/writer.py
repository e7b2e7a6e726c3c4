"""Entries -> IndexFile bytes: the streaming writer of one window's files.

In: one window's entries ``(phy_offset, key_hash, store_timestamp_ms)`` in CommitLog order, in batches.
Out: that window's files, each created at full size but sparse, items appended with positional writes,
slot table and header written last; :class:`FileInfo` per file.
Stays true: every byte equals what ``IndexFile.putKey`` writes for the same entries (see the quirks in
:mod:`rocketidx.layout`); memory per writer is its slot table plus one batch; a file in a writer's
directory is complete only once the writer has closed it, and callers stage that directory.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import numpy as np

from rocketidx.commitlog.keys import slot_of
from rocketidx.commitlog.native import kernel
from rocketidx.errors import ConfigError
from rocketidx.index.reader import Header
import rocketidx.layout as L
import rocketidx.storage as storage

_SLOT_BLOCK = 1024  # slots per written block (4 KiB): untouched blocks stay holes in the sparse file


@dataclass
class FileInfo:
    """One written file: what the manifest records and the driver checks before committing."""

    name: str  # staging name; the committed name is assigned in (window, seq) order
    window_id: int
    window_start_ms: int
    seq: int
    header: Header
    created_with_end_phy_offset: int = 0
    created_with_end_timestamp: int = 0

    @property
    def entries(self) -> int:
        return self.header.index_count - L.FIRST_INDEX

    def as_row(self) -> dict:
        d = {"name": self.name, "window_id": self.window_id, "window_start_ms": self.window_start_ms,
             "seq": self.seq}
        d.update(asdict(self.header))
        return d


def time_diffs(store_ts: np.ndarray, begin_ts: int) -> np.ndarray:
    """``putKey``'s time diff: seconds since the header's begin, 0 without a begin, clamped to int32."""
    if begin_ts <= 0:
        return np.zeros(len(store_ts), np.int64)
    diff = np.floor_divide(store_ts - begin_ts, 1000)  # negative diffs end up 0 either way
    return np.clip(diff, 0, L.MAX_TIME_DIFF_S, out=diff)


@dataclass
class _OpenFile:
    path: str
    fd: int
    header: Header
    slots: np.ndarray  # the whole slot table, kept in the file's byte order so a flush writes it as is
    created_with: tuple[int, int]


def _chains(slots: np.ndarray, slot: np.ndarray, first: int) -> tuple[np.ndarray, int]:
    """``putKey``'s chains for a batch whose first entry gets item index ``first`` (the numpy reference of the
    kernel's ``index_put``): each entry's prev (the slot's value, 0 where that is 0 or above the item count)
    and how many found their slot empty; ``slots`` is updated to hold each slot's newest entry.

    Within the batch each item links to the previous item of its slot; the first item of a slot links to what
    the table held. One sort of (slot, position) keys gives the groups in order (a value sort of int64 is ~5x
    faster than a stable argsort here)."""
    n = len(slot)
    key = np.sort((slot << 32) | np.arange(n, dtype=np.int64))
    s_sorted = key >> 32
    order = key & 0xFFFFFFFF
    new_group = np.empty(n, bool)
    new_group[0] = True
    np.not_equal(s_sorted[1:], s_sorted[:-1], out=new_group[1:])
    prev_sorted = np.empty(n, np.int64)
    prev_sorted[1:] = order[:-1] + first
    heads = s_sorted[new_group]
    slot_values = slots[heads].astype(np.int64)
    # A head's value came before the batch, so it is at most first - 1 in a table this writer keeps; the
    # kernel's per-entry test against first + i gives the same.
    slot_values[(slot_values <= L.INVALID_INDEX) | (slot_values > first)] = L.INVALID_INDEX
    prev_sorted[new_group] = slot_values
    prev = np.empty(n, np.int64)
    prev[order] = prev_sorted
    last_of_group = np.empty(n, bool)
    last_of_group[-1] = True
    last_of_group[:-1] = new_group[1:]
    slots[s_sorted[last_of_group]] = order[last_of_group] + first
    return prev, int((slot_values == L.INVALID_INDEX).sum())


def at_or_above_end(phy: np.ndarray, end_phy_offset: int) -> np.ndarray:
    """Mask of the entries ``buildIndex`` puts, of one window's entries in CommitLog order: it skips a
    message whose phyOffset is below the current file's endPhyOffset (``end_phy_offset`` before the
    first; a rolled file inherits the full file's end), so the bound is the running maximum."""
    running = np.maximum.accumulate(np.concatenate(([end_phy_offset], phy)))[:-1]
    return phy >= running


class WindowWriter:
    """Writes one window's entries into its sequence of IndexFiles in ``directory``.

    Feed it entries in CommitLog order with :meth:`add`; :meth:`close` finishes the last file and
    returns every file's :class:`FileInfo`. :meth:`suspend`/:meth:`resume` release and reload the slot
    table, so a caller juggling many windows keeps memory bounded.
    """

    def __init__(self, directory: str | os.PathLike, window_id: int, window_ms: int,
                 hash_slot_num: int = L.DEFAULT_HASH_SLOT_NUM, index_num: int = L.DEFAULT_INDEX_NUM,
                 sync: bool = True):
        """``sync=False``: a finished file's writeback is started, not waited for; the caller syncs every file
        (:func:`rocketidx.storage.sync_files`) before anything can publish it."""
        if hash_slot_num <= 0 or index_num <= L.FIRST_INDEX:
            raise ConfigError("hash_slot_num/index_num", (hash_slot_num, index_num),
                              "need at least 1 slot and 2 items (item 0 is never used)")
        self.directory = str(directory)
        self.window_id, self.window_ms = window_id, window_ms
        self.hash_slot_num, self.index_num = hash_slot_num, index_num
        self.file_size = L.index_file_size(hash_slot_num, index_num)
        self.items_at = L.items_offset(hash_slot_num)
        self.files: list[FileInfo] = []
        self.current: _OpenFile | None = None
        self.suspended: tuple[str, Header, tuple[int, int]] | None = None
        self.end_phy_offset = 0  # of the window's current file: buildIndex skips messages below it
        self.skipped_below_end = 0
        self.first_skipped_at: int | None = None  # CommitLog offset of the first record a skip hit
        self.entries = 0
        self.seq0 = 0  # the sequence number of this writer's first file (an incremental build carries earlier ones)
        self.seed: Header | None = None  # the header the next new file is seeded from (a carried full file's)
        self.sync = sync

    def continue_after(self, seq0: int, last: Header, open_path: str | None = None,
                       created_with: tuple[int, int] = (0, 0)) -> None:
        """Go on from a window's earlier files (an incremental build): ``last`` is the header of file
        ``seq0`` - 1 when ``open_path`` is None (a full file: the next entry rolls over to a new file seeded from
        it), else of the not-full file ``seq0`` already copied to ``open_path``, which takes the next entries."""
        self.seq0 = seq0
        self.end_phy_offset = last.end_phy_offset
        if open_path is None:
            self.seed = last
        else:
            self.suspended = (open_path, last, created_with)

    # -- files ----------------------------------------------------------------------------------

    def _new_file(self, seed: Header | None) -> None:
        seq = self.seq0 + len(self.files) + (1 if self.current is not None else 0)
        from rocketidx.index.windows import staging_name
        path = os.path.join(self.directory, staging_name(self.window_id, seq, self.window_ms))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, self.file_size)  # sparse: only written blocks take disk
        if seed is None:
            header, created = Header(), (0, 0)
        else:  # IndexService.getAndCreateLastIndexFile seeds a rolled file from the full one's end
            header = Header(begin_timestamp=seed.end_timestamp, end_timestamp=seed.end_timestamp,
                            begin_phy_offset=seed.end_phy_offset, end_phy_offset=seed.end_phy_offset)
            created = (seed.end_phy_offset, seed.end_timestamp)
        self.current = _OpenFile(path, fd, header, np.zeros(self.hash_slot_num, L.SLOT), created)

    def _finish_file(self) -> None:
        f = self.current
        assert f is not None
        self._flush(f)
        # Durable before anyone can publish it: a commit point (a build's pointer swap, a backfill's
        # checkpoint) must never name a file whose pages a power cut could still lose.
        self._synced(f.fd)
        os.close(f.fd)
        self.files.append(FileInfo(os.path.basename(f.path), self.window_id, self.window_id * self.window_ms,
                                   self.seq0 + len(self.files), f.header, *f.created_with))
        self.current = None

    def _flush(self, f: _OpenFile) -> None:
        """Write the slot table's non-empty blocks and the header (the header last, as the broker does)."""
        slots = f.slots
        whole = len(slots) - len(slots) % _SLOT_BLOCK  # the last block may be short: judged on its own, no copy
        used = np.flatnonzero(np.append(slots[:whole].view(np.int32).reshape(-1, _SLOT_BLOCK).any(axis=1),
                                        bool(slots[whole:].any())))
        blocks = -(-len(slots) // _SLOT_BLOCK)
        used = used[used < blocks]
        if len(used) * 4 > blocks:  # mostly used: one write beats many and holes save little
            used = np.arange(used[0], used[-1] + 1)
        if len(used):
            # Contiguous runs of used blocks become one write each.
            breaks = np.flatnonzero(np.diff(used) != 1)
            run_starts = np.concatenate(([used[0]], used[breaks + 1]))
            run_ends = np.concatenate((used[breaks], [used[-1]])) + 1
            for b0, b1 in zip(run_starts.tolist(), run_ends.tolist()):
                lo, hi = b0 * _SLOT_BLOCK, min(b1 * _SLOT_BLOCK, len(slots))
                os.pwrite(f.fd, slots[lo:hi], L.slots_offset() + lo * L.SLOT.itemsize)
        os.pwrite(f.fd, f.header.to_bytes(), 0)

    # -- entries --------------------------------------------------------------------------------

    def add(self, phy_offset: np.ndarray, key_hash: np.ndarray, store_timestamp_ms: np.ndarray,
            positions: np.ndarray | None = None) -> None:
        """Put a batch of entries, in CommitLog order (``IndexService.buildIndex`` + ``putKey``).

        ``positions``: each entry's record offset in the CommitLog, where it is not ``phy_offset`` (a
        PHYSICALOFFSET field that lies); only used to say where the first skipped entry came from."""
        if self.suspended is not None:
            self.resume()
        phy = np.asarray(phy_offset, np.int64)
        kh = np.asarray(key_hash, np.int64)
        ts = np.asarray(store_timestamp_ms, np.int64)
        if len(phy) == 0:
            return
        keep = at_or_above_end(phy, self.end_phy_offset)
        if not keep.all():
            self.skipped_below_end += int((~keep).sum())
            if self.first_skipped_at is None:  # entries come in CommitLog order: the first skip is the first
                self.first_skipped_at = int((phy if positions is None else np.asarray(positions))[np.argmin(keep)])
            phy, kh, ts = phy[keep], kh[keep], ts[keep]
            if len(phy) == 0:
                return
        lo = 0
        while lo < len(phy):
            if self.current is None:
                self._new_file(self.seed)
                self.seed = None
            elif self.current.header.index_count >= self.index_num:
                full = self.current.header
                self._finish_file()
                self._new_file(full)
            room = self.index_num - self.current.header.index_count
            hi = min(len(phy), lo + room)
            self._put(phy[lo:hi], kh[lo:hi], ts[lo:hi])
            lo = hi
        self.end_phy_offset = int(phy[-1])
        self.entries += len(phy)

    def _put(self, phy: np.ndarray, kh: np.ndarray, ts: np.ndarray) -> None:
        f = self.current
        n = len(phy)
        first = f.header.index_count
        slot = slot_of(kh, self.hash_slot_num)
        if kernel is not None:  # putKey's own loop, compiled: one step per entry
            prev = np.empty(n, np.int64)
            new_slots = kernel.index_put(f.slots, np.ascontiguousarray(slot, np.int64), first, prev)
        else:
            prev, new_slots = _chains(f.slots, slot, first)
        self._write_items(f, phy, kh, ts, prev, new_slots)

    def _write_items(self, f, phy: np.ndarray, kh: np.ndarray, ts: np.ndarray, prev: np.ndarray,
                     new_slots: int) -> None:
        h = f.header
        n = len(phy)
        first = h.index_count
        items = np.empty(n, L.INDEX_ITEM)
        items["key_hash"] = kh
        items["phy_offset"] = phy
        if first <= L.FIRST_INDEX:  # the first entry's diff uses the old begin; later ones its time
            diffs = time_diffs(ts, int(ts[0]))
            diffs[0] = time_diffs(ts[:1], h.begin_timestamp)[0]
        else:
            diffs = time_diffs(ts, h.begin_timestamp)
        items["time_diff_s"] = diffs
        items["prev_index"] = prev
        # Positional writes, not a mapping: dirty mapped pages would count against the task's memory.
        os.pwrite(f.fd, items, self.items_at + first * L.INDEX_ITEM.itemsize)

        f.header = Header(
            begin_timestamp=int(ts[0]) if first <= L.FIRST_INDEX else h.begin_timestamp,
            end_timestamp=int(ts[-1]),
            begin_phy_offset=int(phy[0]) if first <= L.FIRST_INDEX else h.begin_phy_offset,
            end_phy_offset=int(phy[-1]),
            hash_slot_count=h.hash_slot_count + new_slots,
            index_count=first + n,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def suspend(self) -> None:
        """Write the current file's state and drop its slot table from memory."""
        if self.current is None:
            return
        f = self.current
        self._flush(f)
        os.close(f.fd)
        self.suspended = (f.path, f.header, f.created_with)
        self.current = None

    def resume(self) -> None:
        path, header, created = self.suspended
        fd = os.open(path, os.O_RDWR)
        raw = os.pread(fd, self.hash_slot_num * L.SLOT.itemsize, L.slots_offset())
        slots = np.frombuffer(raw, L.SLOT).copy()
        self.current = _OpenFile(path, fd, header, slots, created)
        self.suspended = None

    def close(self) -> list[FileInfo]:
        if self.suspended is not None:  # suspend() already wrote slots and header: sync and record the file
            path, header, created = self.suspended
            fd = os.open(path, os.O_RDONLY)
            try:
                self._synced(fd)
            finally:
                os.close(fd)
            self.files.append(FileInfo(os.path.basename(path), self.window_id, self.window_id * self.window_ms,
                                       self.seq0 + len(self.files), header, *created))
            self.suspended = None
        if self.current is not None:
            self._finish_file()
        return self.files

    def _synced(self, fd: int) -> None:
        """Sync a finished file now, or (``sync=False``) start its writeback for the caller's sync to find done:
        a build's tasks then never wait on the disk, which writes while they compute."""
        if self.sync:
            os.fdatasync(fd)
        else:
            storage.start_writeback(fd)

    def abort(self) -> None:
        """Close without finishing: for error paths (the staging directory is discarded)."""
        if self.current is not None:
            os.close(self.current.fd)
            self.current = None
