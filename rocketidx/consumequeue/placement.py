"""Where a queue's entries land: ``ConsumeQueue.putMessagePositionInfo``, one queue at a time.

In: a queue's :class:`QueueState` and its next records in CommitLog order (QUEUEOFFSET, stored
PHYSICALOFFSET, TOTALSIZE). Out: :class:`Placed`: which of them are appended (each at the queue's write
position, one slot after the other), the blank slots filled before the first one, and the state after.

Stays true (docs/formats.md, "ConsumeQueue entries", Where an entry lands), for each record in order:
1. ``phy + size <= maxPhysicOffset``: no entry;
2. the queue's last file takes it: the first file is created at ``q*20 - (q*20 % fileSize)``, a full last
   file is followed by the next (even when step 4 then drops the record);
3. the first file, still empty, with ``q != 0``: blanks up to ``q*20`` (``fillPreBlank``), the queue's
   minimum becomes ``q*20``;
4. ``q != 0`` and ``q*20`` below the write position: no entry;
5. else appended at the write position, even past ``q*20`` (a gap is never filled);
6. ``q == 0`` skips 3 and 4; 7. an appended entry sets ``maxPhysicOffset = phy + size``.
A log whose queue offsets simply count up takes the vectorised path (every record appended at its own
slot); the rules run record by record only from the first record where that does not hold.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNIT = 20  # bytes per slot (layout.CQ_UNIT)


@dataclass
class QueueState:
    """One queue as the broker's ConsumeQueue holds it while dispatching (logical offsets in bytes)."""

    file_size: int
    max_phy: int = -1  # maxPhysicOffset: phy + size of the last appended entry
    first_file: int | None = None  # fileFromOffset of the queue's first file (None: no file yet)
    files_end: int = 0  # end of the last file created
    write_pos: int = 0  # where the next entry is appended
    min_offset: int = 0  # minLogicOffset: where fillPreBlank stopped (0 unless the queue started late)
    entries: int = 0  # entries appended (blanks not counted)

    @property
    def slots(self) -> int:
        """Written slots, blanks included: ``getMaxOffsetInQueue``."""
        return self.write_pos // UNIT


@dataclass
class Placed:
    """What one call placed: ``appended`` indexes the records given (in order); ``blanks`` slots were
    filled from ``blank_from`` (bytes) before the first of them."""

    appended: np.ndarray
    blanks: int = 0
    blank_from: int = 0
    dropped_repeated: int = 0  # step 4 ("build consume queue repeatedly")
    dropped_below_max: int = 0  # step 1
    gaps: int = 0  # appended past q*20 ("logic queue order maybe wrong")


def place(state: QueueState, q: np.ndarray, phy: np.ndarray, size: np.ndarray) -> Placed:
    """Place a queue's next records (see the module docstring); ``state`` is updated in place."""
    n = len(q)
    out = Placed(np.zeros(0, np.int64))
    appended: list[int] = []
    start = 0
    if n and state.first_file is None:
        if _put_one(state, int(q[0]), int(phy[0]), int(size[0]), out):
            appended.append(0)
        start = 1
    if start < n:
        # The common case: every record goes to the next slot, its QUEUEOFFSET exactly that slot, and ends
        # past the entry before it (so step 1 keeps it): appended as a run, no per-record rules.
        end = phy[start:] + size[start:]
        expect = state.write_pos // UNIT + np.arange(n - start)
        regular = (q[start:] == expect) & (q[start:] != 0)
        regular &= end > np.concatenate(([state.max_phy], end[:-1]))
        bad = np.flatnonzero(~regular)
        k = n - start if len(bad) == 0 else int(bad[0])
        if k:
            append_run(state, k, int(end[k - 1]))
            appended.extend(range(start, start + k))
        for i in range(start + k, n):
            if _put_one(state, int(q[i]), int(phy[i]), int(size[i]), out):
                appended.append(i)
    out.appended = np.asarray(appended, np.int64)
    return out


def append_run(state: QueueState, k: int, last_end: int) -> None:
    """``k`` records appended one after the other (no step drops them): files follow the write position."""
    state.write_pos += k * UNIT
    state.entries += k
    state.max_phy = last_end
    f = state.file_size
    state.files_end = max(state.files_end, -(-state.write_pos // f) * f)


def _put_one(state: QueueState, q: int, phy: int, size: int, out: Placed) -> bool:
    """One record through steps 1-7; whether it was appended."""
    if phy + size <= state.max_phy:  # step 1
        out.dropped_below_max += 1
        return False
    f = state.file_size
    expect = q * UNIT
    if state.first_file is None:  # step 2: the queue's first file
        state.first_file = state.write_pos = expect - (expect % f)
        state.files_end = state.first_file + f
        if q != 0:  # step 3: the first file, still empty
            out.blanks = (expect - state.first_file) // UNIT
            out.blank_from = state.first_file
            state.write_pos = state.min_offset = expect
    elif state.write_pos == state.files_end:  # step 2: the last file is full, the next one is created
        state.files_end += f
    if q != 0 and expect < state.write_pos:  # step 4
        out.dropped_repeated += 1
        return False
    if q != 0 and expect != state.write_pos:  # appended past its slot: later entries stay shifted
        out.gaps += 1
    state.write_pos += UNIT  # step 5
    state.entries += 1
    state.max_phy = phy + size  # step 7
    return True


# --- runs: the same rules, a run of records at a time -----------------------------------------------------
#
# A split's read knows each record's QUEUEOFFSET but not the queue's state when its records arrive (that
# depends on every earlier split). Cut into runs whose records the rules treat alike, a queue's records
# are placed from a few numbers per run, in order, and the records themselves go wherever their slots
# say, by any task. A run is a maximal stretch of one queue's records, in CommitLog order, whose entry
# ends (phy + size) strictly increase and whose QUEUEOFFSETs either count up by one, none of them 0
# (CONSECUTIVE), or are all 0 (ZERO: steps 3 and 4 skip them). On a clean log a queue is one run per split.

CONSECUTIVE, ZERO = 0, 1


def find_runs(q: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Where runs start in one queue's records (``q`` QUEUEOFFSETs, ``end`` = phy + size, CommitLog
    order): indexes, the first always 0 (empty for no record)."""
    if not len(q):
        return np.zeros(0, np.int64)
    zero = q == 0
    brk = (zero[1:] != zero[:-1]) | (end[1:] <= end[:-1]) | (~zero[1:] & (q[1:] != q[:-1] + 1))
    return np.concatenate(([0], np.flatnonzero(brk) + 1)).astype(np.int64)


@dataclass
class RunsPlaced:
    """Where each run's records land: ``skip[r]`` of them (from its start) make no entry, the next
    ``count[r]`` take the slots from ``slot[r]`` on, one after the other; the rest of the run make no entry
    either (never: a run's records after its first appended one are all appended)."""

    skip: np.ndarray
    slot: np.ndarray
    count: np.ndarray
    blanks: int = 0
    blank_from: int = 0
    dropped_repeated: int = 0
    dropped_below_max: int = 0
    gaps: int = 0


def place_runs(state: QueueState, kind: np.ndarray, q0: np.ndarray, n: np.ndarray, first_end: np.ndarray,
               last_end: np.ndarray, ends_of) -> RunsPlaced:
    """Place a queue's next runs (see above) exactly as :func:`place` would their records; ``state`` is
    updated in place. ``ends_of(r)``: run ``r``'s entry ends, asked for only when its first end is not past
    the queue's ``maxPhysicOffset`` (records a replayed or rewritten log repeats; rare)."""
    runs = len(n)
    out = RunsPlaced(np.zeros(runs, np.int64), np.zeros(runs, np.int64), np.zeros(runs, np.int64))
    f = state.file_size
    for r in range(runs):
        k1 = 0
        if first_end[r] <= state.max_phy:  # step 1 drops a prefix: ends increase within a run
            k1 = int(np.searchsorted(np.asarray(ends_of(r)), state.max_phy, side="right"))
            out.dropped_below_max += k1
            if k1 >= n[r]:
                out.skip[r] = n[r]
                continue
        m = int(n[r]) - k1
        qa = int(q0[r]) + k1 if kind[r] == CONSECUTIVE else 0
        if state.first_file is None:  # steps 2 and 3 for the queue's first record
            expect = qa * UNIT
            state.first_file = state.write_pos = expect - expect % f
            state.files_end = state.first_file + f
            if qa != 0:
                out.blanks = (expect - state.first_file) // UNIT
                out.blank_from = state.first_file
                state.write_pos = state.min_offset = expect
        elif state.write_pos == state.files_end:  # step 2, for the run's first record that reaches it
            state.files_end += f
        k2 = 0
        if kind[r] == CONSECUTIVE:
            w = state.write_pos // UNIT
            k2 = min(m, w - qa) if qa < w else 0  # step 4 drops those below the write position
            out.dropped_repeated += k2
            if qa + k2 != w:  # appended past their slots (k2 == 0 here): every one a gap
                out.gaps += m - k2
        out.skip[r], out.slot[r], out.count[r] = k1 + k2, state.write_pos // UNIT, m - k2
        if m - k2:
            append_run(state, m - k2, int(last_end[r]))
    return out
