"""``backfill --store``, the ConsumeQueues: what a repair of a stopped broker's queues would change.

In: ``STORE`` (``commitlog/``, ``consumequeue/``), the queue file size (the size most of the store's queue
files share, else the broker's or ``--cq-file-size``) and the delay table. Out: a :class:`QueuePlan`: every
queue file of a clean rebuild of the CommitLog, and every file the store holds, each with what the repair
does: ``keep`` (the same bytes: left untouched), ``replace`` (other bytes or another length: a damaged file,
a dirty tail), ``write`` (missing: a lost queue or file), ``remove`` (a file no rebuild makes: moved to the
backup).

Stays true: nothing in the store is written (the rebuild goes to a scratch directory the caller owns); a
``consumequeue/`` holding something that is not a queue file by its path (a name that is not 20 digits, a
queueId directory that is not a number, a file at the topic level) is refused, naming it, before anything
is read; so is a store whose queue files share no size most of them have.
"""
from __future__ import annotations

import filecmp
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import rocketidx.layout as L
from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS, dispatch
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.consumequeue.writer import ConsumeQueueWriter
from rocketidx.errors import StoreLayoutError

ACTIONS = ("keep", "replace", "write", "remove")


def queue_files(cq_dir: Path) -> dict[str, int]:
    """``topic/queueId/name`` -> size of every queue file under ``cq_dir``; anything else there is refused."""
    out: dict[str, int] = {}
    if not cq_dir.is_dir():
        return out
    for topic in sorted(os.listdir(cq_dir)):
        tdir = cq_dir / topic
        if not tdir.is_dir():
            raise StoreLayoutError(str(tdir), "a file where a topic directory belongs: not a ConsumeQueue; move it "
                                              "out of consumequeue/ first")
        for qid in sorted(os.listdir(tdir)):
            qdir = tdir / qid
            if not qdir.is_dir() or not qid.lstrip("-").isdigit():
                raise StoreLayoutError(str(qdir), "not a queue directory (named by a decimal queue id); move it out "
                                                  "of consumequeue/ first")
            for name in sorted(os.listdir(qdir)):
                path = qdir / name
                if not (len(name) == L.CQ_NAME_DIGITS and name.isdigit()) or not path.is_file():
                    raise StoreLayoutError(str(path), "not a ConsumeQueue file (a 20-digit name); move it out of "
                                                      "consumequeue/ first")
                out[f"{topic}/{qid}/{name}"] = path.stat().st_size
    return out


def store_queue_file_size(files: dict[str, int], fallback: int) -> tuple[int, str]:
    """The size most of the store's queue files share (a file of another length is damage), else ``fallback``;
    refused when no size is shared by most files. (size, where it came from)."""
    sizes = Counter(files.values())
    if not sizes:
        return fallback, "no queue file to read it from: --cq-file-size, the broker's conf, else 6,000,000"
    (size, n), *rest = sizes.most_common(2) + [(None, 0)]
    if n * 2 <= len(files):
        other = rest[0][0]
        raise StoreLayoutError("consumequeue/", f"no file size is shared by most queue files ({n} of {len(files)} "
                                                f"are {size} bytes, others {other}): give --cq-file-size")
    if size % L.CQ_UNIT.itemsize:
        raise StoreLayoutError("consumequeue/", f"most queue files are {size} bytes, not a multiple of 20")
    return size, f"{n} of {len(files)} queue files"


@dataclass
class QueuePlan:
    store: str
    file_size: int
    size_from: str
    actions: dict[str, list[str]] = field(default_factory=lambda: {a: [] for a in ACTIONS})
    rebuilt: str | None = None  # where the rebuild lies (the caller's scratch directory)

    @property
    def changes(self) -> int:
        return sum(len(v) for k, v in self.actions.items() if k != "keep")

    def as_dict(self) -> dict:
        return {"file_size": self.file_size, "file_size_from": self.size_from,
                "counts": {k: len(v) for k, v in self.actions.items()},
                **{k: v for k, v in self.actions.items() if k != "keep"}}

    def lines(self) -> list[str]:
        out = [f"consumequeue: files of {self.file_size:,} bytes ({self.size_from}); "
               + ", ".join(f"{k} {len(v)}" for k, v in self.actions.items())]
        for action in ("replace", "write", "remove"):
            for rel in self.actions[action][:20]:
                out.append(f"  {action:8} consumequeue/{rel}")
            if len(self.actions[action]) > 20:
                out.append(f"  ... and {len(self.actions[action]) - 20} more to {action}")
        if not self.changes:
            out.append("  nothing to change: every queue file is the rebuild's")
        return out


def make_queue_plan(store: str | os.PathLike, scratch: str, *, cq_file_size: int | None = None,
                    delays_ms: tuple[int, ...] = DEFAULT_DELAYS_MS, check_crc: bool = True) -> QueuePlan:
    """Rebuild the store's queues under ``scratch`` (one pass, as the broker's dispatch) and compare file by
    file (see the module docstring). ``cq_file_size``: the size where no queue file of the store tells it
    (the store's own files win: they are what the broker loads)."""
    store = Path(store)
    if not (store / "commitlog").is_dir():
        raise StoreLayoutError(str(store), "no commitlog/ directory: not a broker's store")
    cq_dir = store / "consumequeue"
    files = queue_files(cq_dir)
    size, size_from = store_queue_file_size(files, cq_file_size or L.DEFAULT_CQ_FILE_SIZE)
    rebuilt = os.path.join(scratch, "consumequeue")
    writer = ConsumeQueueWriter(rebuilt, size)
    reader = CommitLogReader(list_segments(str(store / "commitlog")), check_crc=check_crc)
    for seg, buf, recs in reader.record_chunks():
        writer.add(seg, dispatch(buf, seg, recs, delays_ms))
    built = {f"{q.topic}/{q.queue_id}/{name}" for q in writer.close(sync=False) for name in q.files}
    plan = QueuePlan(str(store), size, size_from, rebuilt=rebuilt)
    for rel in sorted(built | set(files)):
        if rel not in files:
            plan.actions["write"].append(rel)
        elif rel not in built:
            plan.actions["remove"].append(rel)
        elif files[rel] == size and filecmp.cmp(cq_dir / rel, os.path.join(rebuilt, rel), shallow=False):
            plan.actions["keep"].append(rel)
        else:
            plan.actions["replace"].append(rel)
    return plan
