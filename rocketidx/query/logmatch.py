"""Was this index built from this CommitLog? A sample of its entries against the messages they point at.

In: IndexFiles (oldest first, opened as :class:`rocketidx.index.reader.IndexFile`), the CommitLog given with
them, and the build's record of where it read (its manifest's ``commitlog``, when there is one). Out: a
:class:`LogMatch`: how many entries were sampled, how many of them point inside the log's present
segments, and how many of those point at a message that makes an entry with their keyHash; and a verdict,
:attr:`LogMatch.another_log`, which ``stats`` turns into an error (:func:`require_same_log`) and
``verify`` into one line of its report.

Stays true:
* cheap: at most :data:`SAMPLE` entries, read one item at a time (20 bytes each) and their messages by
  ranged reads (:func:`rocketidx.query.lookup.read_messages_at`), whatever the size of the index or the log;
* a log that grew since the build (segments added, the oldest removed) is the same log: entries outside
  the log's present offsets are not judged, and the entries inside still point at their messages;
* damage is not another log: a corrupt stretch of the right log fails the entries that point into it,
  and the verdict needs most of the judged sample (and at least :data:`MIN_JUDGED` entries) to fail,
  where an index of another log fails nearly every one (an offset of one log is rarely a record start
  of another, and then with a message making the same key hash almost never);
* entries point at PHYSICALOFFSET fields, which are positions only in an undamaged log: where the build
  recorded fields out of place, or a record read here (a sampled one, or the first of a segment the
  sample reads) carries a field that is not its position (segments swapped, say), there is no verdict.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rocketidx.errors import IndexLogMismatchError
from rocketidx.index.reader import IndexFile
import rocketidx.layout as L
import rocketidx.storage as storage

SAMPLE = 32  # entries looked at, spread evenly over the index's items
MIN_JUDGED = 4  # fewer judged entries give no verdict: one damaged record must not make another log


@dataclass(frozen=True)
class LogMatch:
    """The sample's outcome; ``miss``: the first entry judged that points at no message with its key, as
    (file, byte offset of the item, phyOffset, keyHash)."""

    sampled: int
    judged: int  # sampled entries whose offset lies in the log's present segments
    matched: int  # judged entries at a message that makes an entry with their keyHash
    miss: tuple[str, int, int, int] | None = None
    built_from: str | None = None  # the manifest's commitlog
    fields_out_of_place: bool = False  # offsets are not positions here: no verdict

    @property
    def another_log(self) -> bool:
        return not self.fields_out_of_place and self.judged >= MIN_JUDGED and 2 * self.matched < self.judged

    def reason(self) -> str:
        """Why the verdict is what it is, in one clause (for an error or a report line)."""
        text = (f"{self.judged - self.matched} of {self.judged} sampled entries point at offsets where no "
                "message makes their key")
        if self.miss is not None:
            file, offset, phy, kh = self.miss
            text += f" (first: {storage.redact(file)} @ byte {offset}: phyOffset {phy}, keyHash {kh})"
        if self.built_from:
            text += f"; its manifest names the CommitLog {self.built_from}"
        return text


def sample_positions(counts: Sequence[int], n: int = SAMPLE) -> list[tuple[int, int]]:
    """(file, item number) of up to ``n`` items spread evenly over files holding ``counts`` items each."""
    total = int(sum(counts))
    if total <= 0:
        return []
    flat = np.unique(np.linspace(0, total - 1, min(n, total)).round().astype(np.int64))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    fi = np.searchsorted(starts, flat, side="right") - 1
    return [(int(f), L.FIRST_INDEX + int(p - starts[f])) for f, p in zip(fi, flat)]


def match_log(files: Sequence[IndexFile], commitlog: str | os.PathLike, *, check_crc: bool = True,
              built_from: str | None = None, fields_out_of_place: bool = False, n: int = SAMPLE) -> LogMatch:
    """Sample the entries of ``files`` that can lie in ``commitlog``'s present offsets (files whose
    header's offset range meets them) and look each one's message up. ``fields_out_of_place``: the build
    saw PHYSICALOFFSET fields that are not positions (its manifest's ``phy_mismatch``): no verdict."""
    from rocketidx.commitlog.entries import extract_entry_keys
    from rocketidx.commitlog.keys import key_hash
    from rocketidx.query.lookup import read_messages_at
    from rocketidx.commitlog.segments import list_segments
    segments = list_segments(commitlog)
    if not segments:
        return LogMatch(0, 0, 0, built_from=built_from)
    lo, hi = segments[0].base_offset, segments[-1].end_offset
    usable = [f for f in files if L.FIRST_INDEX < f.header.index_count <= f.index_num
              and f.header.end_phy_offset >= lo and f.header.begin_phy_offset < hi]
    picks = []  # (file, item byte offset, phyOffset, keyHash)
    for fi, item in sample_positions([f.header.index_count - 1 for f in usable], n):
        f = usable[fi]
        row = f.items[item]
        picks.append((f.path, L.items_offset(f.hash_slot_num) + item * L.INDEX_ITEM.itemsize,
                      int(row["phy_offset"]), int(row["key_hash"])))
    judged = [p for p in picks if lo <= p[2] < hi]
    if not judged:
        return LogMatch(len(picks), 0, 0, built_from=built_from)
    if fields_out_of_place:
        return LogMatch(len(picks), len(judged), 0, built_from=built_from, fields_out_of_place=True)
    # The first record of each segment read: a field that is not its position means the log's offsets
    # are not positions (the sampled records are checked the same way below).
    heads = sorted({s.base_offset for s in segments for p in judged if s.base_offset <= p[2] < s.end_offset})
    offsets = [p[2] for p in judged]
    table, found = read_messages_at(commitlog, offsets + heads, check_crc=check_crc)
    fields = table.column("phy_offset").to_numpy(zero_copy_only=False)
    read_at = np.asarray(offsets + heads, np.int64)
    if (np.asarray(found) & (fields != read_at)).any():
        return LogMatch(len(picks), len(judged), 0, built_from=built_from, fields_out_of_place=True)
    table, found = table.slice(0, len(judged)), found[:len(judged)]
    rows = np.flatnonzero(found)
    keys_of: dict[int, set[int]] = {}
    if len(rows):
        import pyarrow as pa
        messages = table.take(pa.array(rows))
        at, _, keys = extract_entry_keys(messages)
        for r, h in zip(at.tolist(), key_hash(keys).tolist()):
            keys_of.setdefault(int(rows[r]), set()).add(int(h))
    ok = [p[3] in keys_of.get(i, ()) for i, p in enumerate(judged)]
    miss = next((p for p, good in zip(judged, ok) if not good), None)
    return LogMatch(len(picks), len(judged), sum(ok), miss, built_from)


def require_same_log(index: str, files: Sequence[IndexFile], commitlog: str | os.PathLike, *,
                     check_crc: bool = True, built_from: str | None = None, fields_out_of_place: bool = False
                     ) -> LogMatch:
    """:func:`match_log`, raising :class:`IndexLogMismatchError` when the index is another log's."""
    m = match_log(files, commitlog, check_crc=check_crc, built_from=built_from,
                  fields_out_of_place=fields_out_of_place)
    if m.another_log:
        raise IndexLogMismatchError(storage.redact(str(index)), storage.redact(str(commitlog)), m.reason())
    return m


def require_index_of_log(index_dir: str | os.PathLike, commitlog: str | os.PathLike, hash_slot_num: int | None = None,
                         index_num: int | None = None, *, check_crc: bool = True) -> LogMatch:
    """:func:`require_same_log` of the index in ``index_dir`` (opened as every reader opens it), for the
    statistics of either engine."""
    from rocketidx.output.open import open_index_dir
    d = open_index_dir(index_dir, hash_slot_num, index_num)
    h = d.manifest.header if d.manifest is not None else {}
    return require_same_log(str(index_dir), d.open(check=False), commitlog, check_crc=check_crc,
                            built_from=h.get("commitlog"), fields_out_of_place=h.get("phy_mismatch") is not None)


__all__ = ["LogMatch", "MIN_JUDGED", "SAMPLE", "match_log", "require_index_of_log", "require_same_log",
           "sample_positions"]
