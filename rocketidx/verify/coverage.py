"""The CommitLog outside an index's offsets -> the entries it lacks there: the ``uncovered`` problems.

In: the CommitLog, the offsets ``[lo, hi]`` the index's items span (None: no item at all), how the build read
the log (:class:`rocketidx.verify.core.BuildRead`: a range build's offsets and times), and optionally the
offset from which a restart of the broker would index again (``restored_from``). Out: :class:`Gap` rows, one
per stretch of the log before ``lo`` or after ``hi`` whose messages make entries, each with its entries,
messages and first and last message offsets; a stretch at or past ``restored_from`` is marked restored.

Why: the content check judges the bytes the index's files cover, so an index that lost its newest (or
oldest) files looked clean. The broker never re-indexes what lies below its queues' highest end after a
clean stop (docs/formats.md, "What a restart dispatches again"), so such entries are lost to
``queryMsgByKey`` until something rebuilds them.

Stays true: only the bytes outside ``[lo, hi]`` are read (the tail from ``hi``'s record on, the head from the
build's start up to ``lo``); the message at ``hi`` belongs to the covered part (its entries are the content
check's); counts are complete.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

import rocketidx.storage as storage


@dataclass
class Gap:
    first: int  # CommitLog offset of the first message in the stretch that makes entries
    last: int  # and of the last one
    entries: int
    messages: int
    segment: str  # where the first one is: its segment and the byte in it
    segment_offset: int
    restored: bool = False  # a restart of the broker would index these again

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        what = (f"{self.entries:,} entries of {self.messages:,} messages at CommitLog offsets "
                f"{self.first}..{self.last} are in no IndexFile")
        return what + ("; a restart indexes them again" if self.restored else "")


class GapTally:
    """Entries of the outside stretches as the chunks come, per stretch: (lost or restored, before or after)."""

    def __init__(self, restored_from: int | None):
        self.restored_from = restored_from
        self.rows: dict[tuple[str, bool], list] = {}

    def add(self, where: str, seg, phy: np.ndarray) -> None:
        if not len(phy):
            return
        restored = (phy >= self.restored_from) if self.restored_from is not None else np.zeros(len(phy), bool)
        for flag in (False, True):
            sel = phy[restored == flag]
            if not len(sel):
                continue
            row = self.rows.get((where, flag))
            first = int(sel[0])
            messages = int(np.count_nonzero(np.diff(sel))) + 1
            if row is None:
                self.rows[(where, flag)] = [first, int(sel[-1]), len(sel), messages, seg.path,
                                            first - seg.base_offset, flag]
            else:
                messages -= int(row[1] == first)  # one message's entries may span two chunks
                row[1], row[2], row[3] = int(sel[-1]), row[2] + len(sel), row[3] + messages

    def gaps(self) -> list[Gap]:
        order = [("head", False), ("head", True), ("tail", False), ("tail", True)]
        return [Gap(*self.rows[k][:4], storage.redact(self.rows[k][4]), *self.rows[k][5:])
                for k in order if k in self.rows]


def log_gaps(commitlog, covered: tuple[int, int] | None, rules=None, *, check_crc: bool = True,
             restored_from: int | None = None) -> list[Gap]:
    """The stretches of ``commitlog`` outside ``covered`` whose messages make entries the index lacks (see
    the module docstring). ``rules``: a :class:`rocketidx.verify.core.BuildRead`; None reads as a bare
    directory (the whole log)."""
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import list_segments
    start = getattr(rules, "start_offset", None)
    end = getattr(rules, "to_offset", None)
    tally = GapTally(restored_from)
    lo, hi = covered if covered is not None else (end if end is not None else 1 << 62, None)
    # The head: from the build's start up to the first indexed message.
    head_end = lo if end is None else min(lo, end)
    segs = list_segments(commitlog, from_offset=start, to_offset=head_end)
    if segs and (start is None or head_end > start):
        reader = CommitLogReader(segs, check_crc=check_crc, start_offset=start, end_offset=head_end)
        for seg, _, _, e in reader.entry_chunks():
            tally.add("head", seg, _kept(e, rules, lambda phy: phy < head_end))
    if hi is not None and (end is None or hi + 1 < end):
        for seg, e in _tail_chunks(commitlog, hi, end, check_crc):
            tally.add("tail", seg, _kept(e, rules, lambda phy: phy > hi))
    return tally.gaps()


def _kept(e, rules, where) -> np.ndarray:
    phy = e.column("phy_offset").to_numpy()
    keep = where(phy)
    if rules is not None:
        keep &= rules.in_time(e.column("store_timestamp_ms").to_numpy())
        if rules.to_offset is not None:
            keep &= phy < rules.to_offset
    return phy[keep]


def _tail_chunks(commitlog, hi: int, end: int | None, check_crc: bool):
    """Entry chunks from the message at ``hi`` on. ``hi`` is an item's offset: when it is no message's start
    (damage the content check reports), the segment holding it is read from its first byte instead."""
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import list_segments
    segs = list_segments(commitlog, from_offset=hi, to_offset=end)
    if not segs:
        return
    reader = CommitLogReader(segs, check_crc=check_crc, start_offset=hi, end_offset=end)
    got = False
    for seg, _, recs, e in reader.entry_chunks():
        got = got or len(recs) > 0
        yield seg, e
    stop = reader.stop
    if not got and stop is not None and stop.phy_offset == hi and hi > segs[0].base_offset:
        reader = CommitLogReader(segs, check_crc=check_crc, end_offset=end)
        for seg, _, _, e in reader.entry_chunks():
            yield seg, e


def add_gap_problems(report, gaps: list[Gap]) -> None:
    """The gaps not restored, as ``uncovered`` problems (one per stretch, counted in entries), and every gap
    in ``report.gaps``."""
    report.gaps = [g.as_dict() for g in gaps]
    for g in gaps:
        if g.restored:
            continue
        report.counts["uncovered"] += g.entries
        from rocketidx.verify.report import Problem
        report.problems.append(Problem(g.segment, g.segment_offset, "uncovered", g.describe()))
