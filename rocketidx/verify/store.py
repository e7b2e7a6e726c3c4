"""``verify --store``: a stopped broker's whole store against its CommitLog, with what a restart would do.

In: ``STORE`` as a broker leaves it: ``commitlog/``, ``index/``, ``consumequeue/``, ``checkpoint``, ``abort``,
``lock``. Out: a :class:`StoreReport`: the store's state (whether it crashed, who holds its lock, the
checkpoint, where a restart's re-dispatch would start: ``../shared/spec/consume-queue.md`` §7), one
:class:`rocketidx.verify.report.VerifyReport` per area (``index``, ``consumequeue``, ``checkpoint``), and for
every kind of problem found what a restart of the broker does about it.

One read of the CommitLog: a rebuild of the queues and the index into scratch space, against which the queues
are compared; an index that is the rebuild's byte for byte needs only its structure checked, any other is
verified against the log as ``verify --index`` does (a second read).

Stays true: nothing in the store is written or created (the lock is probed, not taken); ``abort`` and a
lock are state, not problems; a checkpoint field is a problem only where a restart would then delete or
miss data; the areas are judged by the same code as ``verify --index`` and ``verify --consumequeue``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import rocketidx.layout as L
from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS
from rocketidx.commitlog.records import scan_records
from rocketidx.commitlog.segments import Segment, list_segments, open_segment
from rocketidx.errors import StoreLayoutError
from rocketidx.output.broker import lock_state, read_checkpoint
from rocketidx.output.local import same_bytes
from rocketidx.verify.core import open_for_verify, verify_index
from rocketidx.verify.queues import list_queues, verify_consumequeues
from rocketidx.verify.report import VerifyReport

# What a restart does about each kind of problem (the broker's load, recover and re-dispatch).
CQ_RESTART = {
    "file-size": "the broker's load stops at a queue file of another length: it does not start",
    "name": "not a queue file by its name: the broker's load trips on it",
    "stray-file": "not a queue: the broker's load trips on it",
    "missing-file": "{redispatch}",
    "missing-entry": "{redispatch}",
    "missing-queue": "{redispatch}",
    "dirty-tail": "truncateDirtyLogicFiles cuts entries at or past the CommitLog's end",
    "wrong-field": "kept: consumers are sent another message than the CommitLog puts there",
    "extra-entry": "kept: consumers are sent a message the CommitLog does not put there",
    "extra-file": "kept",
    "unexplained-queue": "kept: a queue the CommitLog does not explain",
    "order": "kept: consumers read these entries as they are",
    "blank": "kept",
    "zero": "kept",
}
REDISPATCH = ("a restart re-dispatches the records from offset {start} on ({how}), and a queue takes only those "
              "past its last entry: an entry missing before that stays missing and its message is never consumed")
INDEX_RESTART = ("kept, unless an abnormal restart deletes the file (endTimestamp past the checkpoint's "
                 "indexMsgTimestamp); the re-dispatch indexes records from offset {start} on only")
CHECKPOINT_RESTART = {
    "index-deleted-on-restart": "the abnormal restart deletes these IndexFiles and re-indexes only from the "
                                "recovery start: keys of earlier messages are lost to queryMsgByKey",
}


@dataclass
class StoreReport:
    store: str
    state: dict
    areas: dict[str, VerifyReport] = field(default_factory=dict)
    restart: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return all(r.clean for r in self.areas.values())

    def as_dict(self) -> dict:
        return {"store": self.store, "clean": self.clean, "state": self.state,
                "areas": {k: v.as_dict() for k, v in self.areas.items()}, "restart": self.restart}


def recovery_start(segments: list[Segment], checkpoint: dict | None, abort: bool, queues_max_offset: int | None,
                   check_crc: bool = True) -> tuple[int, str]:
    """Where a restart's re-dispatch starts (§7): after a crash, the newest segment whose first record is
    valid and stored at or before min(physicMsgTimestamp, logicsMsgTimestamp) - 3 s; after a clean stop,
    the segment holding the highest offset any queue references. (offset, how it was found)."""
    if not segments:
        return 0, "no CommitLog"
    if not abort:
        if queues_max_offset is None:
            return segments[0].base_offset, "a clean stop, no queue entry: the first segment"
        seg = next((s for s in reversed(segments) if s.base_offset <= queues_max_offset), segments[0])
        return seg.base_offset, f"a clean stop: the segment holding the queues' highest offset {queues_max_offset}"
    cp = checkpoint or {}
    bound = min(cp.get("physic_msg_timestamp_ms", 0), cp.get("logics_msg_timestamp_ms", 0)) - 3000
    for seg in reversed(segments):
        ts = _first_store_time(seg, check_crc)
        if ts is not None and ts <= bound:
            return seg.base_offset, (f"a crash: the newest segment whose first message is stored by the "
                                     f"checkpoint's min(physic, logics) - 3 s = {bound}")
    return segments[0].base_offset, "a crash, and no segment starts before the checkpoint: the first segment"


def _first_store_time(seg: Segment, check_crc: bool) -> int | None:
    buf = open_segment(seg)
    try:
        for recs in scan_records(buf, seg, 0, 1, check_crc=check_crc, batch_records=1):
            if len(recs):
                return int(recs[0, L.REC_STORE_TS])
        return None
    finally:
        if hasattr(buf, "close"):
            buf.close()


def queues_max_offset(directory: str) -> int | None:
    """The highest CommitLog offset any queue's newest file references (a clean restart starts there)."""
    report = VerifyReport()
    queues, file_size = list_queues(directory, report)
    best = None
    for key, offsets in queues.items():
        if not offsets:
            continue
        units = np.fromfile(os.path.join(directory, *key, f"{max(offsets):020d}"), L.CQ_UNIT)
        used = units[(units["size"] != 0) & (units["size"] != L.CQ_BLANK[1])]
        if len(used):
            best = max(best or 0, int(used["phy_offset"].max()))
    return best


def verify_store(store: str | os.PathLike, *, hash_slot_num: int | None = None, index_num: int | None = None,
                 delays_ms: tuple[int, ...] = DEFAULT_DELAYS_MS, check_crc: bool = True,
                 cq_file_size: int = L.DEFAULT_CQ_FILE_SIZE, index_check=verify_index, builder=None) -> StoreReport:
    """Check every area of ``store`` against its CommitLog (see the module docstring). ``cq_file_size``: the
    queue file size where no queue file tells it.

    One read: ``builder`` (the in-process build by default; :func:`rocketidx.spark.verify.verify_store_spark`
    gives Spark's) rebuilds the queues and the index, with the store's sizes and as the broker writes it (one
    sequence), into scratch space; the queues are compared with that rebuild. An index whose files are the
    rebuild's byte for byte needs only its structure checked; any other is checked by ``index_check`` against
    the log, which reads it again."""
    store = Path(store)
    commitlog = store / "commitlog"
    if not commitlog.is_dir():
        raise StoreLayoutError(str(store), "no commitlog/ directory: not a broker's store")
    segments = list_segments(str(commitlog))
    checkpoint = read_checkpoint(store)
    abort = (store / "abort").exists()
    cq_dir = store / "consumequeue"
    top = queues_max_offset(str(cq_dir)) if cq_dir.is_dir() else None
    start, how = recovery_start(segments, checkpoint, abort, top, check_crc)
    state = {"abort": abort, "lock": lock_state(store), "checkpoint": checkpoint,
             "recovery_start": {"offset": start, "how": how},
             "index": (store / "index").is_dir(), "consumequeue": cq_dir.is_dir()}
    report = StoreReport(str(store), state)
    pre, files, sizes = VerifyReport(), [], None
    if (store / "index").is_dir() and any((store / "index").iterdir()):
        files, _ = open_for_verify(store / "index", hash_slot_num, index_num, pre)
        sizes = (files[0].hash_slot_num, files[0].index_num) if files else None
    file_size = (list_queues(str(cq_dir), VerifyReport())[1] if cq_dir.is_dir() else 0) or cq_file_size
    scratch = Path(tempfile.mkdtemp(prefix="rocketidx-store-verify-"))
    try:
        rebuilt = _rebuild(commitlog, scratch / "build", sizes, file_size, delays_ms, check_crc, builder)
        if sizes is not None or pre.problems:
            same = bool(files) and not pre.problems and len(files) == len(rebuilt.index) and all(
                same_bytes(f.path, b) for f, b in zip(files, rebuilt.index))
            idx = verify_index(files) if same else index_check(files, str(commitlog), check_crc=check_crc,
                                                                  open_start=True)
            if same:
                idx.expected_entries, idx.covered_range = rebuilt.entries, rebuilt.covered
            idx.problems[:0] = pre.problems
            idx.counts.update(pre.counts)
            report.areas["index"] = idx
            report.restart["index"] = {k: INDEX_RESTART.format(start=start) for k in idx.counts}
            report.areas["checkpoint"] = _checkpoint_problems(files, checkpoint, abort)
        # A store without consumequeue/ lost every queue: each one the log dispatches is missing.
        cq = verify_consumequeues(str(cq_dir), str(commitlog), delays_ms=delays_ms, check_crc=check_crc,
                                  file_size=cq_file_size, rebuild=rebuilt.queues)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report.areas["consumequeue"] = cq
    redispatch = REDISPATCH.format(start=start, how=how)
    report.restart["consumequeue"] = {k: CQ_RESTART.get(k, "kept").format(redispatch=redispatch) for k in cq.counts}
    cp = report.areas.get("checkpoint")
    if cp is not None:
        report.restart["checkpoint"] = {k: CHECKPOINT_RESTART[k] for k in cp.counts}
    return report


@dataclass
class _Rebuilt:
    index: list[Path]  # the rebuilt IndexFiles, oldest first
    entries: int
    covered: tuple[int, int] | None
    queues: Callable  # a ``rebuild`` for verify_consumequeues: the queues already built


def _rebuild(commitlog: Path, out: Path, sizes: tuple[int, int] | None, file_size: int, delays_ms, check_crc: bool,
             builder) -> _Rebuilt:
    """The one read: the queues (and, with ``sizes``, the index) rebuilt from the whole log into ``out``."""
    from rocketidx.config import BuildConfig
    from rocketidx.consumequeue.writer import QueueInfo
    from rocketidx.output.manifest import CONSUMEQUEUE_DIR, INDEX_DIR, Manifest
    if builder is None:
        from rocketidx.build.local import build_index as builder
    config = BuildConfig(hash_slot_num=sizes[0] if sizes else L.DEFAULT_HASH_SLOT_NUM,
                         index_num=sizes[1] if sizes else L.DEFAULT_INDEX_NUM, window_ms=0, timezone="UTC",
                         check_crc=check_crc, targets=("index", "consumequeue") if sizes else ("consumequeue",),
                         cq_file_size=file_size, delay_levels=" ".join(f"{d // 1000}s" for d in delays_ms))
    manifest, summary = builder(commitlog, out, config, time_index=None)
    rows = list(Manifest.from_dict(manifest, str(out)).files) if sizes else []
    infos = [QueueInfo(**q) for q in manifest["consumequeues"]["queues"]]
    segments = list_segments(str(commitlog))
    log_end = summary.stop["phy_offset"] if summary.stop else (segments[-1].end_offset if segments else 0)
    return _Rebuilt([out / INDEX_DIR / f.name for f in rows], summary.entries,
                    (min(f.begin_phy_offset for f in rows), max(f.end_phy_offset for f in rows)) if rows else None,
                    lambda *_: (str(out / CONSUMEQUEUE_DIR), infos, log_end))


def _checkpoint_problems(files, checkpoint: dict | None, abort: bool) -> VerifyReport:
    """After a crash the broker deletes IndexFiles whose endTimestamp passes indexMsgTimestamp (index-build.md
    §8): each such file is a problem (its keys are lost unless the re-dispatch reaches back to them)."""
    out = VerifyReport()
    if not abort:
        return out
    index_ts = (checkpoint or {}).get("index_msg_timestamp_ms", 0)
    for f in files:
        if f.header.end_timestamp > index_ts:
            out.add(f.path, 0, "index-deleted-on-restart",
                    f"endTimestamp {f.header.end_timestamp} > the checkpoint's indexMsgTimestamp {index_ts}")
    return out
