"""The index backfill: a stopped broker's store -> a plan, then a safe rebuild of the index range the broker lost.

In: ``STORE`` as a broker leaves it (``commitlog/``, ``index/``, ``checkpoint``, ``abort``, ``lock``).
Out: a :class:`Plan` (printed; all of ``--dry-run``), and, when run, new IndexFiles installed into
``STORE/index`` with the files they replace moved to ``STORE/index.backup/<UTC time>/`` together with the
old checkpoint and a ``journal.json`` of every move.

Stays true:
* nothing is touched while the broker's ``lock`` file is locked (the broker holds a POSIX lock on it, as
  Java's ``FileChannel.tryLock`` takes on Linux); rocketidx holds that lock itself while it works, so a
  broker cannot start half way;
* the files the broker will delete at its next abnormal start (``abort`` present and endTimestamp
  greater than the checkpoint's indexMsgTimestamp: docs/verify.md, "What a restart dispatches again"), damaged files (failing verification) and
  every file after the first of those are replaced; the kept files form a clean prefix in name order;
* the rebuilt range starts at the end of the last kept file (the entries of its last message already in
  it are not repeated) and runs to the end of the CommitLog; new files get names that sort after every
  kept file and are verified against the CommitLog before anything moves;
* files move one atomic rename at a time, old ones to the backup first; the checkpoint's
  indexMsgTimestamp becomes the newest installed endTimestamp (its other fields untouched, written via a
  temporary file and a rename), or the broker's next abnormal start would delete the new files again;
* run on its own result, the plan is empty and nothing changes.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rocketidx.arrays import unique_sorted
import rocketidx.backfill.swap as swap
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import BuildConfig
from rocketidx.errors import CorruptIndexError, StoreLayoutError
from rocketidx.index.reader import IndexFile
import rocketidx.layout as L
from rocketidx.broker.store import CHECKPOINT_FIELD, BrokerStore
from rocketidx.output.local import same_bytes
from rocketidx.output.manifest import INDEX_DIR, Manifest, ManifestFile
from rocketidx.output.open import IndexDir, open_index_dir
from rocketidx.verify.core import verify_index
from rocketidx.verify.report import VerifyReport

@dataclass
class FileState:
    name: str
    entries: int
    end_timestamp: int
    end_phy_offset: int
    status: str  # keep | broker-deletes | damaged | incomplete | after-damaged
    reason: str = ""


@dataclass
class Plan:
    store: str
    hash_slot_num: int
    index_num: int
    window_ms: int
    checkpoint: dict | None
    abort: bool
    files: list[FileState] = field(default_factory=list)
    rebuild_from: int | None = None  # absolute CommitLog offset
    skip_entries: int = 0  # entries of the message at rebuild_from that the last kept file already holds
    rebuild_to: int | None = None  # where reading the CommitLog stops
    commitlog_start: int = 0
    messages_in_range: int = 0

    @property
    def replaced(self) -> list[str]:
        return [f.name for f in self.files if f.status != "keep"]

    @property
    def kept(self) -> list[FileState]:
        return [f for f in self.files if f.status == "keep"]

    @property
    def nothing_to_do(self) -> bool:
        return not self.replaced and self.messages_in_range == 0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(replaced=self.replaced, nothing_to_do=self.nothing_to_do)
        return d

    def describe(self) -> str:
        lines = [f"store {self.store}: hash slots {self.hash_slot_num:,}, index num {self.index_num:,}, "
                 f"window {'one sequence' if not self.window_ms else f'{self.window_ms} ms'}"]
        cp = self.checkpoint
        lines.append(f"checkpoint indexMsgTimestamp {cp[CHECKPOINT_FIELD] if cp else 'missing'}; abort file "
                     f"{'present: the broker crashed or is running' if self.abort else 'absent: clean shutdown'}")
        lines.append(f"{'index file':24} {'entries':>10} {'endTimestamp':>14} {'endPhyOffset':>14}  status")
        for f in self.files:
            lines.append(f"{f.name:24} {f.entries:>10,} {f.end_timestamp:>14} {f.end_phy_offset:>14}  {f.status}"
                         + (f" ({f.reason})" if f.reason else ""))
        if not self.files:
            lines.append("(no index files)")
        if self.nothing_to_do:
            lines.append("nothing to do: every message up to the end of the CommitLog is indexed in files the "
                         "broker keeps")
            return "\n".join(lines)
        lines.append(f"rebuild CommitLog offsets {self.rebuild_from}..{self.rebuild_to} "
                     f"({self.messages_in_range:,} messages lack index entries"
                     + (f"; the first {self.skip_entries} entries of the message at {self.rebuild_from} are kept"
                        if self.skip_entries else "") + ")")
        if self.replaced:
            lines.append(f"replace {len(self.replaced)} file(s), moved to index.backup/ first: "
                         + ", ".join(self.replaced))
        lines.append("then set the checkpoint's indexMsgTimestamp to the newest installed file's endTimestamp")
        return "\n".join(lines)


def index_dir(store: BrokerStore, hash_slot_num: int | None, index_num: int | None) -> IndexDir:
    """``STORE/index`` (none yet is no files) with the sizes the broker used
    (:func:`rocketidx.output.open.open_index_dir`); whatever their source, every file must fit them."""
    d = open_index_dir(store.index, hash_slot_num, index_num, missing_ok=True)
    size = L.index_file_size(d.hash_slot_num, d.index_num)
    for path in d.paths:
        if os.path.getsize(path) != size:
            raise StoreLayoutError(path, f"file size {os.path.getsize(path)} does not fit hash slots "
                                         f"{d.hash_slot_num:,} and index num {d.index_num:,} ({size} bytes); pass "
                                         f"the broker's maxHashSlotNum and maxIndexNum as --hash-slots and --index-num")
    _check_full_headers(d, size)
    return d


def _check_full_headers(d: IndexDir, size: int) -> None:
    """Sizes that fit the file length can still be wrong (one equation, two unknowns): a full file (its
    last item slot holds an item) must say ``indexCount == indexNum`` in its header. A contradiction
    stops the backfill before it judges every file damaged and replaces them all."""
    item = L.INDEX_ITEM.itemsize
    for path in d.paths:
        with open(path, "rb") as f:
            raw = f.read(L.INDEX_HEADER.itemsize)
            f.seek(size - item)
            last = f.read(item)
        if len(raw) < L.INDEX_HEADER.itemsize or not any(last):
            continue
        count = int(np.frombuffer(raw, L.INDEX_HEADER)[0]["index_count"])
        if count != d.index_num:
            raise StoreLayoutError(path, f"a full file whose header says indexCount {count:,}, but the sizes in use "
                                         f"say indexNum {d.index_num:,} (hash slots {d.hash_slot_num:,}, from the "
                                         f"{d.index_num_from}); the sizes contradict the files: pass the broker's "
                                         "maxHashSlotNum and maxIndexNum, or leave them out to read them off the files")


def make_plan(store: str | os.PathLike, *, hash_slot_num: int | None = None, index_num: int | None = None,
              window_ms: int = 0, check_crc: bool = True) -> Plan:
    store = BrokerStore.open(store)
    index = index_dir(store, hash_slot_num, index_num)
    checkpoint = store.checkpoint()
    abort = store.crashed
    plan = Plan(str(store), index.hash_slot_num, index.index_num, window_ms, checkpoint, abort)
    files = index.open(check=False)
    for f in files:
        plan.files.append(FileState(f.name, max(0, f.header.index_count - 1), f.header.end_timestamp,
                                    f.header.end_phy_offset, "keep"))
    index_ts = checkpoint[CHECKPOINT_FIELD] if checkpoint else 0
    if abort:
        for st in plan.files:
            if st.end_timestamp > index_ts:
                st.status, st.reason = "broker-deletes", f"endTimestamp > checkpoint {index_ts}"
        # Store times need not rise from file to file: a file the broker keeps may follow one it deletes. The
        # kept files must stay a prefix of the sequence (the rebuild starts at the last one's end), so such a
        # file is replaced too, or the deleted file's range would never be rebuilt.
        first = next((i for i, st in enumerate(plan.files) if st.status == "broker-deletes"), None)
        for st in plan.files[first + 1:] if first is not None else []:
            if st.status == "keep":
                st.status, st.reason = "after-damaged", "follows a file the broker deletes"
    candidates = [(f, st) for f, st in zip(files, plan.files) if st.status == "keep"]
    # Verify the candidates as one sequence; the first bad file and everything after it are replaced.
    report = verify_index([f for f, _ in candidates], store.commitlog, check_crc=check_crc, open_end=True,
                          open_start=True, gaps=False)  # the plan rebuilds from the last kept file's end itself
    bad_files = {}
    for p in report.problems:
        bad_files.setdefault(os.path.basename(p.file), p)
    first_bad = None
    for i, (f, st) in enumerate(candidates):
        p = bad_files.get(f.name)
        if p is not None and first_bad is None:
            first_bad = i
            st.status = "incomplete" if p.kind == "missing" else "damaged"
            st.reason = f"{p.kind} @ byte {p.offset}: {p.detail}"
        elif first_bad is not None:
            st.status, st.reason = "after-damaged", "follows a replaced file"
    kept = [(f, st) for f, st in candidates if st.status == "keep"]
    segments = store.segments()
    plan.commitlog_start = segments[0].base_offset
    if kept and kept[-1][0].header.index_count > 1:
        last = kept[-1][0]
        plan.rebuild_from = last.header.end_phy_offset
        phy = last.read_item_fields(L.FIRST_INDEX, last.header.index_count, ("phy_offset",))["phy_offset"]
        plan.skip_entries = int(np.count_nonzero(phy == plan.rebuild_from))
    else:
        plan.rebuild_from = plan.commitlog_start
    _count_range(plan, store, check_crc)
    return plan


def plan_from_rebuild(store: BrokerStore, rebuilt: list[Path], *, hash_slot_num: int | None, index_num: int | None,
                      window_ms: int) -> Plan | None:
    """The plan when ``STORE/index`` is, file for file in name order, byte for byte ``rebuilt`` (a rebuild of
    the whole CommitLog with the store's sizes, oldest first): every file kept and nothing to do, with no
    verification (a file equal to what RocketMQ writes from this log is intact). None where that is not so
    (:func:`make_plan` then verifies file by file), or where an abnormal restart would delete some of them
    (past the checkpoint's indexMsgTimestamp: the plan replaces those)."""
    index = index_dir(store, hash_slot_num, index_num)
    if len(index.paths) != len(rebuilt) or not all(same_bytes(a, b) for a, b in zip(index.paths, rebuilt)):
        return None
    checkpoint = store.checkpoint()
    abort = store.crashed
    plan = Plan(str(store), index.hash_slot_num, index.index_num, window_ms, checkpoint, abort)
    index_ts = checkpoint[CHECKPOINT_FIELD] if checkpoint else 0
    for f in index.open(check=False):
        if abort and f.header.end_timestamp > index_ts:
            return None
        plan.files.append(FileState(f.name, max(0, f.header.index_count - 1), f.header.end_timestamp,
                                    f.header.end_phy_offset, "keep", "identical to the rebuild"))
    return plan


def _count_range(plan: Plan, store: BrokerStore, check_crc: bool) -> None:
    """Messages in the rebuild range that make entries not yet indexed, and where reading stops."""
    from rocketidx.commitlog.entries import drop_first_entries
    from rocketidx.commitlog.readers import CommitLogReader
    segs = store.segments(plan.rebuild_from)
    reader = CommitLogReader(segs, check_crc=check_crc, start_offset=plan.rebuild_from)
    count = 0
    for seg, buf, recs, entries in reader.entry_chunks():
        phy = drop_first_entries(entries, plan.rebuild_from, plan.skip_entries).column("phy_offset").to_numpy()
        count += len(unique_sorted(phy))
    plan.messages_in_range = count
    plan.rebuild_to = reader.stop.phy_offset if reader.stop else plan.rebuild_from


@dataclass
class BackfillResult:
    plan: Plan
    installed: list[str] = field(default_factory=list)
    backup_dir: str | None = None
    checkpoint_index_ts: int | None = None
    wall_s: float = 0.0


def run_backfill(store: str | os.PathLike, *, hash_slot_num: int | None = None, index_num: int | None = None,
                 window_ms: int = 0, timezone_name: str = "local", dry_run: bool = False,
                 check_crc: bool = True, builder=None, log=print) -> BackfillResult:
    """Plan, and unless ``dry_run``, rebuild and install. ``builder`` is the build function
    (``rocketidx.build.in_process.build_index`` by default; the Spark pipeline's has the same signature)."""
    t0 = time.monotonic()
    store = BrokerStore.open(store)
    if dry_run:
        log("dry run: nothing in the store changes; its lock is taken shared, so read access is enough")
    with store.lock(create=not dry_run):
        roll_back_interrupted(store, dry_run, log)
        return backfill_locked(store, hash_slot_num=hash_slot_num, index_num=index_num, window_ms=window_ms,
                               timezone_name=timezone_name, dry_run=dry_run, check_crc=check_crc, builder=builder,
                               log=log, t0=t0)


def roll_back_interrupted(store: Path, dry_run: bool, log) -> list[str]:
    """Roll back every interrupted index backfill of ``store`` (a dry run only says it would); the backups."""
    return swap.roll_back_interrupted(store, "index", dry_run, log, "backfill")


def backfill_locked(store: BrokerStore, *, hash_slot_num: int | None, index_num: int | None, window_ms: int,
                    timezone_name: str, dry_run: bool, check_crc: bool, builder, log, t0: float,
                    plan: Plan | None = None, stamp: str | None = None) -> BackfillResult:
    """:func:`run_backfill`'s plan and install, with the store's lock already held by the caller (the lock
    cannot be taken twice by one process: closing a second descriptor would drop the POSIX lock).
    ``plan``: one already made (:func:`plan_from_rebuild`), else :func:`make_plan` makes it; ``stamp``: the
    swap's (:func:`rocketidx.backfill.swap.new_stamp`), shared with the queues' in one repair."""
    plan = plan or make_plan(store, hash_slot_num=hash_slot_num, index_num=index_num, window_ms=window_ms,
                             check_crc=check_crc)
    log(plan.describe())
    result = BackfillResult(plan)
    if dry_run or plan.nothing_to_do:
        result.wall_s = time.monotonic() - t0
        return result
    if builder is None:
        from rocketidx.build.in_process import build_index as builder
    config = BuildConfig(hash_slot_num=plan.hash_slot_num, index_num=plan.index_num, window_ms=window_ms,
                         timezone=timezone_name, check_crc=check_crc)
    stamp = stamp or swap.new_stamp()
    swap.clear_staging(store, "index", log)
    staging = swap.staging_dir(store, "index", stamp)
    staging.parent.mkdir(parents=True, exist_ok=True)
    kept = plan.kept
    new_files = []
    try:
        if plan.messages_in_range:
            built, summary = builder(store.commitlog, staging, config, start_offset=plan.rebuild_from,
                                     skip_entries=plan.skip_entries, name_after=kept[-1].name if kept else None)
            new_files = list(Manifest.from_dict(built, str(staging)).files)
            log(f"rebuilt {summary.entries:,} entries of {summary.messages:,} messages into "
                f"{len(new_files)} file(s)")
        _verify_staged(staging, new_files, plan, store, check_crc)
        newest = max([f.end_timestamp for f in new_files] + [f.end_timestamp for f in kept] + [0])
        # The checkpoint's indexMsgTimestamp names the newest installed file, or the broker's next abnormal
        # start would delete the new files again.
        result.checkpoint_index_ts = newest if new_files else None
        backup = swap.install(swap.Swap(
            store, "index", staging / INDEX_DIR, tuple(plan.replaced), tuple(f.name for f in new_files),
            checkpoint={CHECKPOINT_FIELD: newest} if new_files else {},
            note={"replace": list(plan.replaced), "install": [f.name for f in new_files],
                  "checkpoint_before": plan.checkpoint, "checkpoint_index_msg_timestamp": result.checkpoint_index_ts}),
            stamp)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        swap.drop_empty_staging(store, "index")
    result.installed = [f.name for f in new_files]
    result.backup_dir = str(backup)
    result.wall_s = time.monotonic() - t0
    log(f"installed {len(new_files)} file(s); replaced files and the old checkpoint are in {backup}; "
        f"checkpoint indexMsgTimestamp = {result.checkpoint_index_ts}")
    return result


def _verify_staged(staging: Path, new_files: list[ManifestFile], plan: Plan, store: BrokerStore, check_crc: bool) -> None:
    """The staged files, after the last kept one, must verify clean against the CommitLog (content and
    coverage, so the entries of the message they continue count once) and sort after it; otherwise
    nothing is installed."""
    if not new_files:
        return
    kept = plan.kept
    files = [IndexFile(store.index / kept[-1].name, plan.hash_slot_num, plan.index_num, check=False)] if kept else []
    files += [IndexFile(staging / INDEX_DIR / f.name, plan.hash_slot_num, plan.index_num, check=False)
              for f in new_files]
    # A part of the sequence: the log before it is the kept files' business, not these.
    report: VerifyReport = verify_index(files, store.commitlog, check_crc=check_crc, open_start=bool(kept),
                                        gaps=False)
    if report.problems:
        p = report.problems[0]
        raise CorruptIndexError(p.file, p.offset, f"staged file failed verification, nothing installed: "
                                                  f"[{p.kind}] {p.detail}")
    if kept and new_files[0].name <= kept[-1].name:
        raise CorruptIndexError(str(staging), 0, "new file names do not sort after the kept files")


def interrupted(store: Path) -> list[tuple[Path, dict]]:
    """The index backfills of ``store`` stopped between their journal and its ``finished``, oldest first."""
    return swap.interrupted(store, "index")
