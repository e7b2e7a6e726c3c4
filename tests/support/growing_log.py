"""A CommitLog that lives: it grows (in place and by segments), a crash restart cuts and rewrites its tail, and
retention removes its oldest segments. The tests of incremental builds write it out step by step.

The log's records are those of one generated store; a rewrite gives every record from the cut on new store
times (outside the body CRC, so the records stay valid), which moves their entries to other windows. The
history is the same log with no segment removed: what a one-sequence output must equal, less the files a
broker's retention deletes.
"""
from __future__ import annotations

import os

import numpy as np

import rocketidx.layout as L
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments


class World:
    def __init__(self, commitlog: str):
        self.segments = list_segments(commitlog)
        rows = []
        for seg, buf, recs in CommitLogReader(self.segments, check_crc=False).record_chunks():
            v6 = (recs[:, L.REC_SYSFLAG] & L.SYSFLAG_BORNHOST_V6) != 0
            ts_at = seg.base_offset + recs[:, L.REC_POS] + L.RECORD_PREFIX.itemsize + np.where(v6, 20, 8)
            rows.append(np.stack([seg.base_offset + recs[:, L.REC_POS] + recs[:, L.REC_TOTAL], ts_at,
                                  recs[:, L.REC_STORE_TS]], axis=1))
        table = np.concatenate(rows)
        self.ends, self.ts_at, self.ts = table[:, 0], table[:, 1], table[:, 2]
        self.data = {s.base_offset: open(s.path, "rb").read() for s in self.segments}
        self.delta = np.zeros(len(self.ends), np.int64)
        self.count = 0  # records in the log now
        self.first = 0  # index of the log's first segment now

    @property
    def n(self) -> int:
        return len(self.ends)

    @property
    def end(self) -> int:
        return int(self.ends[self.count - 1]) if self.count else 0

    def segment_of(self, offset: int) -> int:
        return max(i for i, s in enumerate(self.segments) if s.base_offset <= offset)

    # -- steps -------------------------------------------------------------------------------------------

    def grow(self, records: int) -> None:
        self.count = min(self.n, self.count + records)

    def rewrite(self, back: int, shift_ms: int, rng: np.random.Generator) -> None:
        """A crash restart: the last ``back`` records are cut (not below the log's first segment) and
        written again with other store times (``shift_ms`` plus a little jitter each)."""
        lowest = int(np.searchsorted(self.ends, self.segments[self.first].base_offset, side="right"))
        cut = max(lowest, 1, self.count - back)  # one record stays: a log of no segment is no log
        self.delta[cut:] = shift_ms + rng.integers(0, 1000, self.n - cut)
        self.count = max(cut, min(self.n, cut + int(rng.integers(0, back + 1))))

    def retire(self) -> bool:
        """Retention removes the oldest segment, if it is not the one being written."""
        if self.count == 0 or self.segment_of(self.end) <= self.first:
            return False
        self.first += 1
        return True

    # -- writing it out ---------------------------------------------------------------------------------

    def write(self, directory: str, *, history: bool = False, since: int = 0) -> None:
        """The log as it is now (``history``: with the segments retention removed from the ``since``-th on
        still there) in ``directory``."""
        os.makedirs(directory, exist_ok=True)
        end = self.end
        want = {}
        for i, s in enumerate(self.segments):
            if (i < (since if history else self.first)) or (s.base_offset > end) or (s.base_offset == end and i):
                continue
            data = bytearray(self.data[s.base_offset])
            cut = end - s.base_offset
            if cut < len(data):
                data[max(0, cut):] = bytes(len(data) - max(0, cut))
            k = (self.ts_at >= s.base_offset) & (self.ts_at < min(s.end_offset, end)) & (self.delta != 0)
            for at, ts, d in zip(self.ts_at[k].tolist(), self.ts[k].tolist(), self.delta[k].tolist()):
                data[at - s.base_offset:at - s.base_offset + 8] = int(ts + d).to_bytes(8, "big", signed=True)
            want[s.name] = bytes(data)
        for name in os.listdir(directory):
            if name not in want:
                os.unlink(os.path.join(directory, name))
        for name, data in want.items():
            p = os.path.join(directory, name)
            if os.path.exists(p) and open(p, "rb").read() == data:
                continue
            with open(p + ".tmp", "wb") as f:
                f.write(data)
            os.replace(p + ".tmp", p)


def tree(directory: str) -> dict[str, bytes]:
    """Every file under ``directory`` (following the output's links): relative path -> bytes."""
    out = {}
    if not os.path.isdir(directory):
        return out
    for root, _, files in os.walk(directory, followlinks=True):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, directory)] = open(p, "rb").read()
    return out


def broker_retention(index: dict[str, bytes], queues: dict[str, bytes], first: int) -> tuple[dict, dict]:
    """What a broker's retention leaves of a one-sequence output when the log starts at ``first``:
    IndexService.deleteExpiredFile (every file but the last, oldest first, while its endPhyOffset is below
    ``first``) and ConsumeQueue.deleteExpiredFile (each queue's files but the last, oldest first, while the
    offset in its last unit is below ``first``)."""
    names = sorted(index)
    k = 0
    while k < len(names) - 1 and int.from_bytes(index[names[k]][24:32], "big") < first:
        k += 1
    kept_index = {n: index[n] for n in names[k:]}
    by_queue: dict[str, list[str]] = {}
    for path in queues:
        by_queue.setdefault(os.path.dirname(path), []).append(path)
    kept_queues = {}
    for q, paths in by_queue.items():
        paths.sort()
        k = 0
        while k < len(paths) - 1 and int.from_bytes(queues[paths[k]][-20:-12], "big") < first:
            k += 1
        kept_queues.update({p: queues[p] for p in paths[k:]})
    return kept_index, kept_queues
