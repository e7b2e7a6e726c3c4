"""ConsumeQueue files (+ CommitLog) -> problems, each with its file and byte offset.

In: a ``consumequeue`` directory (a build output's, a broker store's, or a bare one) and, optionally, the
CommitLog. Out: a :class:`rocketidx.verify.report.VerifyReport` (the index verify's shape and kinds of
count, listing and ``--json``).

Without the CommitLog, the files alone (the model: Kafka's ``kafka-dump-log --index-sanity-check``):
names (20 digits, a multiple of the file size), sizes (all one size), no file missing in a queue's
sequence, blank slots only where ``fillPreBlank`` puts them (the start of the first file), no zero slot
before a written one, sizes above 0, and ``commitLogOffset + size`` rising from entry to entry (step 1 of
``putMessagePositionInfo`` drops anything else, so a broker never writes it).
With the CommitLog, every slot against a rebuild of the same log with the same file size: a missing or
extra queue, file or entry, a wrong field, and a dirty tail (entries at or past the log's end, which the
broker's ``truncateDirtyLogicFiles`` would cut).
Stays true: memory is one queue file of each side at a time, plus the rebuild on disk.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from functools import partial

import numpy as np

import rocketidx.layout as L
from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS, dispatch
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import LightQueues
from rocketidx.consumequeue.writer import ConsumeQueueWriter
from rocketidx.errors import CorruptRecordError
from rocketidx.verify.report import VerifyReport

UNIT = L.CQ_UNIT.itemsize
UNLOADED_WHY = ("not loaded by the broker: its load skips a directory under a topic not named by an int (a 4.9 "
                "broker writes a light queue whose name holds '/' so, %LMQ%a/b -> %LMQ%a/b/0/); left as it is")
_BLANK = np.array([L.CQ_BLANK], L.CQ_UNIT)[0]


def list_queues(directory: str, report: VerifyReport, unloaded: dict | None = None
                ) -> tuple[dict[tuple[str, str], list[int]], int]:
    """{(topic, queueId): file offsets} under ``directory`` and the queue file size (the size most files share);
    misnamed and missized files are problems, and left out. ``unloaded``: a dict that takes the directories
    under a light queue's topic the broker's load skips (not named by an int: a 4.9 broker's light queue whose
    name holds '/') instead of their ``stray-file`` problems."""
    files: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
    for topic in sorted(os.listdir(directory)):
        tdir = os.path.join(directory, topic)
        if not os.path.isdir(tdir):
            report.add(tdir, 0, "stray-file", "a file where a topic directory belongs")
            continue
        for qid in sorted(os.listdir(tdir)):
            qdir = os.path.join(tdir, qid)
            if unloaded is not None and topic.startswith(LMQ_PREFIX) and os.path.isdir(qdir) \
                    and not qid.lstrip("-").isdigit():
                unloaded[f"{topic}/{qid}"] = UNLOADED_WHY
                continue
            if not os.path.isdir(qdir) or not qid.lstrip("-").isdigit():
                report.add(qdir, 0, "stray-file", "not a queue directory (named by a decimal queue id)")
                continue
            got = files.setdefault((topic, qid), [])
            for name in sorted(os.listdir(qdir)):
                path = os.path.join(qdir, name)
                if not (name.isdigit() and len(name) == L.CQ_NAME_DIGITS) or not os.path.isfile(path):
                    report.add(path, 0, "name", "not a ConsumeQueue file name (20 digits)")
                    continue
                got.append((int(name), path, os.path.getsize(path)))
    sizes = Counter(size for fs in files.values() for _, _, size in fs)
    file_size = sizes.most_common(1)[0][0] if sizes else 0
    out = {}
    for key, fs in files.items():
        kept = []
        for offset, path, size in fs:
            if size != file_size:
                report.add(path, min(size, file_size), "file-size", f"{size} bytes, the other files {file_size}")
            elif offset % file_size:
                report.add(path, 0, "name", f"offset {offset} is not a multiple of the file size {file_size}")
            else:
                kept.append(offset)
        for a, b in zip(kept, kept[1:]):
            if b != a + file_size:
                report.add(os.path.join(directory, *key, f"{a + file_size:020d}"), 0, "missing-file",
                           f"the queue's files jump from {a} to {b}")
        out[key] = kept
    return out, file_size


def _slots(directory: str, key: tuple[str, str], offsets: list[int]):
    """(file path, file offset, slots) of each file of a queue, oldest first."""
    for off in offsets:
        path = os.path.join(directory, *key, f"{off:020d}")
        with open(path, "rb") as f:
            yield path, off, np.frombuffer(f.read(), L.CQ_UNIT)


LMQ_PREFIX = L.LMQ_PREFIX  # a light queue's topic: written from each message's INNER_MULTI_DISPATCH property


def unexplained_why(topic: str, built_topics: set[str]) -> str:
    """Why a queue the store holds is not one the rebuild makes."""
    if topic.startswith(LMQ_PREFIX):
        return ("a light queue (%LMQ%), written from messages' INNER_MULTI_DISPATCH property when the broker runs "
                "with enableMultiDispatch=true: give its broker.conf (--broker-conf) for rocketidx to rebuild and "
                "check it; left as it is")
    if topic not in built_topics:
        return "no record of this topic in the CommitLog (retention may have removed them): left as it is"
    return "no record of this queue in the CommitLog: left as it is"


def _check_queue_alone(directory: str, key, offsets: list[int], report: VerifyReport) -> int:
    """The file-only rules for one queue; returns its entries (slots neither blank nor zero)."""
    entries, last_end, first_zero = 0, -1, None
    for n, (path, off, u) in enumerate(_slots(directory, key, offsets)):
        blank = (u["phy_offset"] == 0) & (u["size"] == 0x7FFFFFFF) & (u["tags_code"] == 0)
        zero = (u["phy_offset"] == 0) & (u["size"] == 0) & (u["tags_code"] == 0)
        used = ~blank & ~zero
        at = np.flatnonzero(blank)
        lead = (int(np.argmax(~blank)) if (~blank).any() else len(u)) if n == 0 else 0  # fillPreBlank's run
        report.add(path, at[at >= lead] * UNIT, "blank", "a blank slot after the queue's first entry")
        if first_zero is not None and used.any():
            report.add(*first_zero, "zero-slot", "a zero slot before later entries")
            first_zero = None
        zeros = np.flatnonzero(zero)
        if len(zeros) and used[zeros[0]:].any():
            report.add(path, zeros[0] * UNIT, "zero-slot", "a zero slot before later entries")
        elif len(zeros) and first_zero is None:
            first_zero = (path, int(zeros[0]) * UNIT)
        slots = np.flatnonzero(used)
        e = u[used]
        report.add(path, slots[e["size"] <= 0] * UNIT, "size", "an entry's size is not above 0")
        ends = e["phy_offset"].astype(np.int64) + e["size"].astype(np.int64)
        report.add(path, slots[ends <= np.concatenate(([last_end], ends[:-1]))] * UNIT, "order",
                   "commitLogOffset + size does not rise past the entry before (step 1 would have dropped it)")
        last_end = int(ends[-1]) if len(ends) else last_end
        entries += len(slots)
    return entries


def verify_consumequeues(directory: str, commitlog=None, *, delays_ms: tuple[int, ...] = DEFAULT_DELAYS_MS,
                         check_crc: bool = True, rebuild=None, file_size: int | None = None,
                         skip_topics=(), unexplained: dict | None = None, restart=None,
                         light_queues: LightQueues | None = None) -> VerifyReport:
    """The checks of the module docstring; with ``commitlog`` also every slot against its rebuild
    (``rebuild``: how, :func:`rebuild_in_process` by default). ``file_size``: the queue file size to rebuild
    with where no file tells it (a store whose ``directory`` is gone or empty: every queue is missing).
    ``skip_topics``: topics neither side is judged on (a broker's BatchCQ topics). ``unexplained``: a dict
    that takes the queues no rebuild makes ({topic/queueId: why}) instead of the ``unexplained-queue``
    problems (``verify --store`` lists them apart). ``restart``: a :class:`QueueRestart` (``verify --store``):
    a queue whose missing entries the broker's restart all restores has them counted there, not as problems.
    ``light_queues``: the broker's light-queue rules (``enableMultiDispatch``), for the default rebuild."""
    report = VerifyReport()
    queues, found_size = list_queues(directory, report, unexplained) \
        if os.path.isdir(directory) or file_size is None else ({}, 0)
    queues = {k: v for k, v in queues.items() if k[0] not in skip_topics}
    file_size = found_size or file_size
    for key, offsets in queues.items():
        report.entries_checked += _check_queue_alone(directory, key, offsets, report)
    if commitlog is None or not file_size:
        return report
    scratch = tempfile.mkdtemp(prefix="rocketidx-cq-verify-")
    try:
        segments = list_segments(commitlog)
        rebuild = rebuild or partial(rebuild_in_process, light_queues=light_queues)
        rebuilt, infos, log_end = rebuild(segments, scratch, file_size, delays_ms, check_crc)
        built = {(q.topic, str(q.queue_id)): q for q in infos if q.topic not in skip_topics}
        report.expected_entries = sum(q.entries for q in built.values())
        report.covered_range = (segments[0].base_offset if segments else 0, log_end)
        topics = {k[0] for k in built}
        for key in sorted(set(queues) | set(built)):
            if unexplained is not None and key not in built:
                unexplained["/".join(key)] = unexplained_why(key[0], topics)
                continue
            log_start = segments[0].base_offset if segments else 0
            if restart is None:
                _compare_queue(directory, rebuilt, key, queues.get(key), built.get(key), file_size, log_end, report,
                               log_start)
                continue
            alone = VerifyReport()
            _compare_queue(directory, rebuilt, key, queues.get(key), built.get(key), file_size, log_end, alone,
                           log_start)
            report.expired_items += alone.expired_items
            restored, lost = restart.tally(directory, rebuilt, key, queues.get(key), file_size)
            keep = lost > 0 or not restored
            for kind, n in alone.counts.items():
                if keep or kind not in MISSING_KINDS:
                    report.counts[kind] += n
                    report.problems += [p for p in alone.problems if p.kind == kind]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report


def rebuild_in_process(segments, scratch: str, file_size: int, delays_ms: tuple[int, ...], check_crc: bool,
                       light_queues: LightQueues | None = None):
    """The log's queues rebuilt under ``scratch`` in one pass: (their directory, their QueueInfo, the log's
    end). A ``rebuild`` for :func:`verify_consumequeues`; :mod:`rocketidx.spark.verify` has Spark's."""
    writer = ConsumeQueueWriter(os.path.join(scratch, "cq"), file_size)
    reader = CommitLogReader(segments, check_crc=check_crc)
    for seg, buf, recs in reader.record_chunks():
        writer.add(seg, dispatch(buf, seg, recs, delays_ms, light_queues))
    log_end = reader.stop.phy_offset if reader.stop else (segments[-1].end_offset if segments else 0)
    return os.path.join(scratch, "cq"), writer.close(sync=False), log_end


MISSING_KINDS = ("missing-queue", "missing-file", "missing-entry")


@dataclass
class QueueRestart:
    """What the broker's restart leaves in each queue (``ConsumeQueue.recover`` then the re-dispatch from
    ``redispatch_from``, a record taken only past the queue's own maxPhysicOffset), against the rebuild:
    the entries the files lack now that it restores, and those still wrong or missing after it."""

    redispatch_from: int | None
    restored: int = 0
    lost: int = 0

    def tally(self, directory: str, rebuilt_dir: str, key, offsets, file_size: int) -> tuple[int, int]:
        from rocketidx.consumequeue.reader import Queue
        want = _queue_units(rebuilt_dir, key)
        have = np.zeros(len(want), L.CQ_UNIT)
        after = np.zeros(len(want), L.CQ_UNIT)
        max_physic = -1
        if offsets:
            q = Queue(key[0], int(key[1]), os.path.join(directory, *key), sorted(offsets), file_size)
            try:
                q.recover()
            except (CorruptRecordError, OSError):  # a file the load refuses: the broker does not start
                return 0, int(np.count_nonzero(want["size"] > 0))
            max_physic = q.max_physic
            for off in q.offsets:
                u = q.units(off)
                lo = off // UNIT
                n = max(0, min(len(u), len(want) - lo))
                have[lo:lo + n] = u[:n]
                keep = max(0, min(n, (q.max_offset - off) // UNIT))
                after[lo:lo + keep] = u[:keep]
        if self.redispatch_from is not None:
            again = (want["size"] > 0) & (want["phy_offset"] >= self.redispatch_from) & \
                (want["phy_offset"] + want["size"] > max_physic)
            after[again] = want[again]
        used = want["size"] > 0
        now_ok, then_ok = used & (have == want), used & (after == want)
        restored = int(np.count_nonzero(then_ok & ~now_ok))
        lost = int(np.count_nonzero(used & ~then_ok))
        self.restored += restored
        self.lost += lost
        return restored, lost


def _queue_units(rebuilt_dir: str, key) -> np.ndarray:
    qdir = os.path.join(rebuilt_dir, *key)
    if not os.path.isdir(qdir):
        return np.zeros(0, L.CQ_UNIT)
    names = sorted(os.listdir(qdir))
    if not names:
        return np.zeros(0, L.CQ_UNIT)
    parts = []
    for n in names:
        with open(os.path.join(qdir, n), "rb") as f:
            parts.append((int(n), np.frombuffer(f.read(), L.CQ_UNIT)))
    end = max(off // UNIT + len(u) for off, u in parts)
    out = np.zeros(end, L.CQ_UNIT)
    for off, u in parts:
        out[off // UNIT:off // UNIT + len(u)] = u
    return out


def _gone(u: np.ndarray, log_start: int) -> np.ndarray:
    """Units that stand for messages the broker's retention removed: an entry below the CommitLog's first
    offset, or a blank (fillPreBlank's, which only ever precede the queue's first entry)."""
    blank = (u["phy_offset"] == _BLANK["phy_offset"]) & (u["size"] == _BLANK["size"])
    return (u["size"] != 0) & (blank | (u["phy_offset"] < log_start))


def _compare_queue(directory: str, rebuilt_dir: str, key, offsets, built, file_size: int, log_end: int,
                   report: VerifyReport, log_start: int = 0) -> None:
    """One queue against its rebuild. Units for messages retention removed (below ``log_start``, the log's
    first offset: a broker keeps a queue file until its last entry is below it) are counted in
    ``expired_items``, not judged."""
    qdir = os.path.join(directory, *key)
    if offsets is None:
        report.add(qdir, 0, "missing-queue", f"the CommitLog dispatches {built.entries} entries to this queue")
        return
    if built is None:
        units = [u for _, _, u in _slots(directory, key, offsets)]
        if log_start and units and all(_gone(u, log_start).sum() == (u["size"] != 0).sum() for u in units):
            report.expired_items += sum(int(_gone(u, log_start).sum()) for u in units)
            return
        report.add(qdir, 0, "unexplained-queue", "the CommitLog dispatches nothing to this queue")
        return
    want = {int(n): n for n in built.files}
    for off in offsets:
        if off not in want:
            u = next(_slots(directory, key, [off]))[2]
            gone = _gone(u, log_start) if log_start else np.zeros(len(u), bool)
            report.expired_items += int(gone.sum())
            used = np.flatnonzero((u["size"] != 0) & ~gone)
            dirty = used[u["phy_offset"][used] >= log_end]
            path = os.path.join(qdir, f"{off:020d}")
            report.add(path, dirty * UNIT, "dirty-tail", f"an entry at or past the CommitLog's end {log_end}")
            report.add(path, np.setdiff1d(used, dirty) * UNIT, "extra-entry", "an entry the CommitLog does not make")
            if not len(used) and not gone.any():
                report.add(path, 0, "extra-file", "a file the rebuild does not have")
    for off in want:
        path = os.path.join(qdir, f"{off:020d}")
        if off not in offsets and not os.path.isfile(path):  # one of another length is a file-size problem
            report.add(path, 0, "missing-file", "the rebuild has this file")
    for off in sorted(set(offsets) & set(want)):
        path = os.path.join(qdir, f"{off:020d}")
        got = next(_slots(directory, key, [off]))[2]
        exp = next(_slots(rebuilt_dir, key, [off]))[2]
        diff = np.flatnonzero(got != exp)
        if log_start and len(diff):
            # A kept entry of a removed message where a build of the log now has a blank or nothing: retention.
            gone = _gone(got[diff], log_start) & ((exp["size"][diff] == 0) | _gone(exp[diff], log_start))
            report.expired_items += int(gone.sum())
            diff = diff[~gone]
        if not len(diff):
            continue
        g_used, e_used = got["size"][diff] != 0, exp["size"][diff] != 0
        dirty = diff[g_used & ~e_used & (got["phy_offset"][diff] >= log_end)]
        extra = diff[g_used & ~e_used & (got["phy_offset"][diff] < log_end)]
        missing = diff[~g_used & e_used]
        wrong = diff[g_used & e_used]
        report.add(path, dirty * UNIT, "dirty-tail", f"an entry at or past the CommitLog's end {log_end}")
        report.add(path, extra * UNIT, "extra-entry", "an entry the CommitLog does not make here")
        report.add(path, missing * UNIT, "missing-entry", "the CommitLog makes an entry here")
        if len(wrong):
            fields = [", ".join(f for f in ("phy_offset", "size", "tags_code") if got[i][f] != exp[i][f])
                      for i in wrong[:20]]
            report.add(path, wrong * UNIT, "wrong-field", [f"{f} differs from the CommitLog's" for f in fields])
