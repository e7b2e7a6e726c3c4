"""A RocksDB consume queue (``storeType=defaultRocksDB``) against the one a dispatch of the whole log makes.

In: the database as the store holds it and as rebuilt (:class:`rocketidx.consumequeue.rocksdb.QueueTable`),
the log's first offset, where the restart dispatches again from. Out: a
:class:`rocketidx.verify.report.VerifyReport` whose problems name ``DB#topic/queueId`` and a queue offset.

Problem kinds: ``missing-entry``, ``wrong-field`` (any of offset, size, tagsCode, store time), ``extra-entry``,
``unexplained-queue`` (entries of a queue no dispatch makes), ``max-offset`` (a queue's ``max`` key is not its
last entry: consumers see another end; missing, consumers see the queue empty), ``min-offset`` (a ``min`` key
past the first entry a consumer may read: the entries before it are never served), ``malformed-key``,
``unreadable`` (RocksDB cannot open the database).

The restart (``RocksDBConsumeQueueStore.recover``): the broker dispatches again from the database's
checkpoint (``CHECKPOINT_TOPIC``; none: from the log's start), writing every entry of those records and each
touched queue's ``max`` again; what lies before stays as it is. Entries it writes again are state (restored),
not problems.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rocketidx.consumequeue.rocksdb import QueueTable
from rocketidx.verify.report import VerifyReport

ROCKSDB_RESTART = {
    "missing-entry": "stays missing: {again}; consumers skip these messages",
    "wrong-field": "kept: consumers are sent what the entry says, not what the CommitLog puts there",
    "extra-entry": "kept: consumers are sent a message the CommitLog does not put there",
    "unexplained-queue": "kept: a queue the CommitLog does not explain",
    "max-offset": "kept: the broker loads each queue's max at start and serves up to it (re-dispatch corrects "
                  "only queues it writes to)",
    "min-offset": "kept until the log's start passes it: consumers are not served the entries before it",
    "malformed-key": "kept: the broker skips it",
    "unreadable": "the broker's load cannot open the database: it does not start",
}


@dataclass
class RocksRestart:
    """Entries the database lacks or holds wrong now, and of those, what the restart writes again."""
    redispatch_from: int
    restored: int = 0
    lost: int = 0


def compare_tables(db: str, have: QueueTable, want: QueueTable, *, log_start: int, redispatch_from: int | None
                   ) -> tuple[VerifyReport, RocksRestart]:
    """``have`` against ``want`` (see the module docstring). ``redispatch_from``: the first record the restart
    dispatches again (the restart model's, from the database's checkpoint; None: none), whose entries are
    state, not problems."""
    report = VerifyReport()
    start = redispatch_from if redispatch_from is not None else 2**63 - 1
    restart = RocksRestart(start)
    fields = ("phy_offset", "size", "tags_code", "store_ts")
    for key in sorted(set(have.entries) | set(want.entries) | set(have.max) | set(want.max)):
        topic, qid = key
        name = f"{db}#{topic}/{qid}"
        a = have.entries.get(key)
        b = want.entries.get(key)
        if b is None:
            if a is not None and len(a):
                report.add(name, a["queue_offset"], "unexplained-queue", "an entry of a queue no dispatch of the "
                                                                         "log makes")
            continue
        report.entries_checked += len(b)
        a = a if a is not None else b[:0]
        _, ia, ib = np.intersect1d(a["queue_offset"], b["queue_offset"], assume_unique=True, return_indices=True)
        missing = np.setdiff1d(b["queue_offset"], a["queue_offset"], assume_unique=True)
        extra = np.setdiff1d(a["queue_offset"], b["queue_offset"], assume_unique=True)
        differ = np.zeros(len(ia), bool)
        for f in fields:
            differ |= a[f][ia] != b[f][ib]
        # The restart writes again every entry of a record at or past its start: those are state.
        miss_rows = np.flatnonzero(np.isin(b["queue_offset"], missing))
        lost_miss = miss_rows[b["phy_offset"][miss_rows] < start]
        lost_wrong = differ & (b["phy_offset"][ib] < start)
        report.add(name, b["queue_offset"][lost_miss], "missing-entry",
                   "the log dispatches an entry at this queue offset")
        wrong_i, wrong_j = ia[lost_wrong], ib[lost_wrong]
        report.add(name, a["queue_offset"][wrong_i], "wrong-field",
                   [f"holds {tuple(int(a[f][i]) for f in fields)}, the log {tuple(int(b[f][j]) for f in fields)}"
                    for i, j in zip(wrong_i[:20].tolist(), wrong_j[:20].tolist())]
                   + ["(offset, size, tagsCode, store time)"] * max(0, len(wrong_i) - 20))
        report.add(name, extra, "extra-entry", "no record of the log is dispatched at this queue offset")
        restart.lost += len(lost_miss) + len(wrong_i)
        restart.restored += len(miss_rows) - len(lost_miss) + int(differ.sum()) - len(wrong_i)
        want_max = want.max.get(key)
        have_max = have.max.get(key)
        if have_max != want_max and not (want_max is not None and want_max[0] >= start):
            report.add(name, (want_max or (0, 0))[1], "max-offset",
                       f"max key {'missing' if have_max is None else f'(offset, queue offset) {have_max}'}, "
                       f"the log's last entry {want_max}")
        first = b["queue_offset"][np.searchsorted(b["phy_offset"], log_start)] \
            if len(b) and b["phy_offset"][-1] >= log_start else (int(b["queue_offset"][-1]) + 1 if len(b) else 0)
        have_min = have.min.get(key)
        if have_min is not None and have_min[0] >= log_start and have_min[1] > first:
            report.add(name, have_min[1], "min-offset", f"min key {have_min}: the first entry a consumer may "
                                                        f"read is at queue offset {first}")
    for family, key, why in have.malformed:
        report.add(f"{db}#{family}", 0, "malformed-key", f"{key[:40].hex()}: {why}")
    return report, restart
