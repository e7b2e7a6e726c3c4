"""``backfill --store``, the ConsumeQueues: what a repair of a stopped broker's queues changes, and the swap.

In: ``STORE`` (``commitlog/``, ``consumequeue/``) and a rebuild of its queues (the repair's one build:
:mod:`rocketidx.backfill.repair`; :func:`make_queue_plan` makes one in this process). Out: a :class:`QueuePlan`:
every queue file of the rebuild and every file the store holds, each with what the repair does: ``keep``
(the same bytes: left untouched), ``replace`` (other bytes or another length: a damaged file, a dirty tail),
``write`` (missing: a lost queue or file), ``remove`` (a file no rebuild makes: moved to the backup); then
:func:`install_queues` swaps them in through :mod:`rocketidx.backfill.swap`, the index backfill's swap too.

Stays true: planning writes nothing in the store; a ``consumequeue/`` holding something that is not a queue
file by its path (a name that is not 20 digits, a queueId directory that is not a number, a file at the topic
level) is refused, naming it, before anything is read; so is a store whose queue files share no size most of
them have (the size comes from the store's files, else the broker's or ``--cq-file-size``).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import rocketidx.layout as L
from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS
from rocketidx.broker.store import BrokerStore
import rocketidx.backfill.swap as swap
from rocketidx.errors import StoreLayoutError
from rocketidx.output.local import same_bytes
from rocketidx.verify.queues import UNLOADED_WHY, rebuild_in_process, unexplained_why

ACTIONS = ("keep", "replace", "write", "remove")




def unloaded_dirs(cq_dir: Path) -> dict[str, str]:
    """``topic/name`` -> why, for each directory under a light queue's topic directory that is not named by an
    int (what a 4.9 broker writes for a light queue whose name holds '/'): the broker's load
    (loadConsumeQueue) skips it, and so does a repair. Anywhere else such a directory is refused."""
    if not cq_dir.is_dir():
        return {}
    return {f"{t}/{q}": UNLOADED_WHY for t in sorted(os.listdir(cq_dir))
            if t.startswith(L.LMQ_PREFIX) and (cq_dir / t).is_dir()
            for q in sorted(os.listdir(cq_dir / t)) if (cq_dir / t / q).is_dir() and not q.lstrip("-").isdigit()}


def queue_files(cq_dir: Path) -> dict[str, int]:
    """``topic/queueId/name`` -> size of every queue file under ``cq_dir``; a directory the broker's load skips
    (:func:`unloaded_dirs`) is left out, anything else there refused."""
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
            if topic.startswith(L.LMQ_PREFIX) and qdir.is_dir() and not qid.lstrip("-").isdigit():
                continue  # the broker's load skips it: unloaded_dirs
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
    unexplained: dict[str, str] = field(default_factory=dict)  # topic/queueId no rebuild makes -> why: left alone
    skipped: dict[str, str] = field(default_factory=dict)  # topic -> why its queues are neither written nor touched
    area: str = "consumequeue"  # or batchconsumequeue (BatchCQ topics' 46-byte units)

    @property
    def changes(self) -> int:
        return sum(len(v) for k, v in self.actions.items() if k != "keep")

    def as_dict(self) -> dict:
        return {"file_size": self.file_size, "file_size_from": self.size_from,
                "counts": {k: len(v) for k, v in self.actions.items()},
                **{k: v for k, v in self.actions.items() if k != "keep"},
                "unexplained": self.unexplained, "skipped": self.skipped}

    def lines(self) -> list[str]:
        a = self.area
        out = [f"{a}: files of {self.file_size:,} bytes ({self.size_from}); "
               + ", ".join(f"{k} {len(v)}" for k, v in self.actions.items())]
        for action in ("replace", "write", "remove"):
            for rel in self.actions[action][:20]:
                out.append(f"  {action:8} {a}/{rel}")
            if len(self.actions[action]) > 20:
                out.append(f"  ... and {len(self.actions[action]) - 20} more to {action}")
        for topic, why in self.skipped.items():
            out.append(f"  skipped  {a}/{topic}: {why}")
        for queue, why in self.unexplained.items():
            out.append(f"  left     {a}/{queue}: {why}")
        if not self.changes:
            out.append("  nothing to change: every queue file is the rebuild's")
        return out


def make_queue_plan(store: str | os.PathLike, scratch: str, *, cq_file_size: int | None = None,
                    delays_ms: tuple[int, ...] = DEFAULT_DELAYS_MS, check_crc: bool = True,
                    light_queues=None) -> QueuePlan:
    """Rebuild the store's queues under ``scratch`` in this process (one pass, as the broker's dispatch) and
    compare file by file (:func:`compare_queues`). ``cq_file_size``: the size where no queue file of the store
    tells it (the store's own files win: they are what the broker loads). The repair itself
    (:func:`rocketidx.backfill.repair.repair_store`) builds with the index, on either engine."""
    store = BrokerStore.open(store)
    files = queue_files(store.consumequeue)
    size, size_from = store_queue_file_size(files, cq_file_size or L.DEFAULT_CQ_FILE_SIZE)
    rebuilt, _, _ = rebuild_in_process(store.segments(), scratch, size, delays_ms, check_crc, light_queues)
    return compare_queues(store, files, size, size_from, Path(rebuilt))


def compare_queues(store: BrokerStore, files: dict[str, int], size: int, size_from: str, rebuilt: Path, *,
                   skip_topics: dict[str, str] | None = None, remove_unexplained: bool = False) -> QueuePlan:
    """The plan: the store's queue ``files`` (:func:`queue_files`) against a rebuild's in ``rebuilt``.

    A queue directory no rebuild makes (a light queue, a topic the log no longer holds) is left alone and
    listed in ``plan.unexplained``, unless ``remove_unexplained`` (its files then move to the backup);
    ``skip_topics`` (topic -> why: a BatchCQ topic) are neither written nor touched."""
    skip_topics = skip_topics or {}
    topic_of = lambda rel: rel.split("/", 1)[0]  # noqa: E731
    built = {r: n for r, n in queue_files(rebuilt).items() if topic_of(r) not in skip_topics}
    files = {r: n for r, n in files.items() if topic_of(r) not in skip_topics}
    cq_dir = store.consumequeue
    plan = QueuePlan(str(store), size, size_from, rebuilt=str(rebuilt))
    plan.skipped = {t: why for t, why in skip_topics.items()}
    plan.unexplained.update(unloaded_dirs(cq_dir))  # never touched, with or without remove_unexplained
    built_queues = {rel.rsplit("/", 1)[0] for rel in built}
    built_topics = {topic_of(rel) for rel in built}
    for rel in sorted(set(built) | set(files)):
        queue = rel.rsplit("/", 1)[0]
        if queue not in built_queues and not remove_unexplained:
            plan.unexplained.setdefault(queue, unexplained_why(topic_of(rel), built_topics))
            continue
        if rel not in files:
            plan.actions["write"].append(rel)
        elif rel not in built:
            plan.actions["remove"].append(rel)
        elif files[rel] == size and same_bytes(cq_dir / rel, rebuilt / rel):
            plan.actions["keep"].append(rel)
        else:
            plan.actions["replace"].append(rel)
    return plan


def batch_queue_plan(store: BrokerStore, rebuilt: Path, file_size: int, size_from: str,
                     topics: tuple[str, ...]) -> QueuePlan:
    """The plan for ``batchconsumequeue/``: the store's files of the BatchCQ ``topics`` against the rebuild's,
    file by file (keep, replace, write, remove); a directory of any other topic is left and listed (the broker
    would not load it as a batch queue: the store's topic table says what is one)."""
    root = store.root / L.BATCH_CQ_DIR
    plan = QueuePlan(str(store), file_size, size_from, rebuilt=str(rebuilt), area=L.BATCH_CQ_DIR)
    theirs = {str(p.relative_to(root)): p for p in root.glob("*/*/*") if p.is_file() and p.parts[-3] in topics} \
        if root.is_dir() else {}
    ours = {str(p.relative_to(rebuilt)): p for p in rebuilt.glob("*/*/*") if p.is_file()} if rebuilt.is_dir() else {}
    for other in sorted(p.name for p in root.iterdir() if p.name not in topics) if root.is_dir() else ():
        plan.unexplained[other] = "not a queue.type=BatchCQ topic in config/topics.json: left as it is"
    for rel in sorted(set(theirs) | set(ours)):
        if rel not in theirs:
            plan.actions["write"].append(rel)
        elif rel not in ours:
            plan.actions["remove"].append(rel)
        elif theirs[rel].stat().st_size == file_size and same_bytes(theirs[rel], ours[rel]):
            plan.actions["keep"].append(rel)
        else:
            plan.actions["replace"].append(rel)
    return plan


def install_batch_queues(store: Path, rebuilt: Path, plan: QueuePlan, stamp: str) -> Path:
    """Swap the plan's batch queue files in (:func:`rocketidx.backfill.swap.install`, area batchconsumequeue);
    the checkpoint is the ConsumeQueue install's to move. The backup directory."""
    a = plan.actions
    return swap.install(swap.Swap(
        store, L.BATCH_CQ_DIR, rebuilt, tuple(a["replace"] + a["remove"]), tuple(a["replace"] + a["write"]),
        note={"replace": a["replace"], "write": a["write"], "remove": a["remove"]}), stamp)


# --- the repair -------------------------------------------------------------------------------------------

@dataclass
class QueueRepair:
    plan: QueuePlan
    backup_dir: str | None = None
    rolled_back: list[str] = field(default_factory=list)  # earlier interrupted repairs undone first


def install_queues(store: Path, rebuilt: Path, plan: QueuePlan, logics_ts: int | None, stamp: str) -> Path:
    """Swap the plan's files in (:func:`rocketidx.backfill.swap.install`): replaced and removed files go to the
    backup, the rebuilt ones come in, and the checkpoint's logicsMsgTimestamp becomes ``logics_ts`` (with the
    queues whole to the log's end, a crash restart need not re-dispatch what they hold). The backup directory."""
    a = plan.actions
    return swap.install(swap.Swap(
        store, "consumequeue", rebuilt, tuple(a["replace"] + a["remove"]), tuple(a["replace"] + a["write"]),
        checkpoint={"logics_msg_timestamp_ms": logics_ts} if logics_ts is not None else {},
        note={"replace": a["replace"], "write": a["write"], "remove": a["remove"], "logics_msg_timestamp": logics_ts}),
        stamp)


def interrupted_queue_repairs(store: Path) -> list[tuple[Path, dict]]:
    """Queue repairs of ``store`` stopped between their journal and its ``finished``, oldest first."""
    return swap.interrupted(store, "consumequeue")


def roll_back_queues(store: Path, backup: Path, journal: dict) -> None:
    """Undo an interrupted queue repair (:func:`rocketidx.backfill.swap.roll_back`)."""
    swap.roll_back(store, "consumequeue", backup, journal)
