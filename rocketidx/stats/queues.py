"""ConsumeQueue statistics: per topic and queue, its files, entries, slots and blank slots, and (with the
CommitLog) the first and last store time of its messages.

In: a ``consumequeue`` directory and optionally the CommitLog its entries point into. Out: one row per
queue (:data:`QUEUE_COLUMNS`) and a summary. Memory is one queue file at a time; the store times are
read at each queue's first and last entry only (two small reads per queue).
"""
from __future__ import annotations

import os

import numpy as np

import rocketidx.layout as L
from rocketidx.query.lookup import read_messages_at

QUEUE_COLUMNS = ("topic", "queue_id", "files", "entries", "blank_slots", "min_offset", "max_offset",
                 "first_phy_offset", "last_phy_offset", "first_store_time_ms", "last_store_time_ms")


def queue_stats(directory: str, commitlog=None) -> tuple[dict, list[dict]]:
    """(summary, rows) for the queues under ``directory`` (see the module docstring)."""
    rows = []
    for topic in sorted(os.listdir(directory)):
        tdir = os.path.join(directory, topic)
        if not os.path.isdir(tdir):
            continue
        for qid in sorted((q for q in os.listdir(tdir) if q.lstrip("-").isdigit()), key=int):
            rows.append(_queue_row(os.path.join(tdir, qid), topic, int(qid)))
    if commitlog is not None:
        firsts = [r["first_phy_offset"] for r in rows if r["entries"]]
        lasts = [r["last_phy_offset"] for r in rows if r["entries"]]
        offsets = sorted(set(firsts) | set(lasts))
        times = {}
        if offsets:
            table, _ = read_messages_at(commitlog, offsets)
            times = dict(zip(offsets, table.column("store_timestamp_ms").to_pylist()))
        for r in rows:
            r["first_store_time_ms"] = times.get(r["first_phy_offset"])
            r["last_store_time_ms"] = times.get(r["last_phy_offset"])
    summary = {"consumequeue": directory, "topics": len({r["topic"] for r in rows}), "queues": len(rows),
               "files": sum(r["files"] for r in rows), "entries": sum(r["entries"] for r in rows),
               "blank_slots": sum(r["blank_slots"] for r in rows),
               "largest_queue": max(rows, key=lambda r: r["entries"])["topic"] if rows else None}
    return summary, rows


def _queue_row(qdir: str, topic: str, queue_id: int) -> dict:
    names = sorted(n for n in os.listdir(qdir) if n.isdigit() and len(n) == L.CQ_NAME_DIGITS)
    entries = blanks = slots_end = 0
    first = last = None
    min_offset = None
    for n in names:
        with open(os.path.join(qdir, n), "rb") as f:
            u = np.frombuffer(f.read(), L.CQ_UNIT)
        blank = (u["phy_offset"] == 0) & (u["size"] == 0x7FFFFFFF) & (u["tags_code"] == 0)
        used = ~blank & (u["size"] != 0)
        written = np.flatnonzero(blank | used)
        if len(written):
            slots_end = int(n) // L.CQ_UNIT.itemsize + int(written[-1]) + 1
            if min_offset is None:
                min_offset = int(n) // L.CQ_UNIT.itemsize + int(np.argmax(~blank))
        at = np.flatnonzero(used)
        if len(at):
            first = int(u["phy_offset"][at[0]]) if first is None else first
            last = int(u["phy_offset"][at[-1]])
        entries += len(at)
        blanks += int(blank.sum())
    return {"topic": topic, "queue_id": queue_id, "files": len(names), "entries": entries, "blank_slots": blanks,
            "min_offset": min_offset or 0, "max_offset": slots_end, "first_phy_offset": first,
            "last_phy_offset": last, "first_store_time_ms": None, "last_store_time_ms": None}
