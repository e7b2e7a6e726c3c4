"""One journaled swap of files into a stopped broker's store: every repair's install, and its roll-back.

In: a :class:`Swap` (the store, its area, ``index`` or ``consumequeue``, the files that leave the area and the
staged files that come in, the checkpoint fields to set after) and a stamp (:func:`new_stamp`). Out: the area
holding the staged files, what left it in the backup, the checkpoint's fields set.

Both areas use one layout (``<stamp>`` is the UTC time to the nanosecond and the process id, so stamps sort by
time and two processes never share one)::

    STORE/<area>.rocketidx-staging/<stamp>/<area>/<rel>   what a repair builds (beside <area>/: the broker loads that)
    STORE/<area>.backup/<stamp>/journal.json              every move, named before the first
    STORE/<area>.backup/<stamp>/checkpoint                the checkpoint from before
    STORE/<area>.backup/<stamp>/<area>/<rel>              the files that left <area>/
    STORE/<area>.backup/<stamp>/progress.json             how far the moves got (for a reader; roll-back needs none)

Stays true, in this order: the old checkpoint is copied and synced, then the journal is written whole
(temporary file, fsync, rename) and the backup's parent synced; only then does a file move, one rename at a
time, leaving files first, so that a name is never held by two files; the touched directories are synced
before the checkpoint changes (a power cut cannot leave a checkpoint that names files not on disk); the journal
says ``finished`` last. A Ctrl-C or SIGTERM waits for the end of the swap; a kill leaves a journal without
``finished``, which :func:`roll_back` undoes: the journal names every move up front, so a move made just before
the kill, not yet counted anywhere, is undone too. Nothing is ever deleted but the staging's leftovers.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocketidx.errors import StoreLayoutError
import rocketidx.interrupts as interrupts
import rocketidx.layout as L
from rocketidx.broker.store import write_checkpoint_fields
from rocketidx.output.local import fsync_dir

AREAS = ("index", "consumequeue", L.BATCH_CQ_DIR)
JOURNAL_FORMAT = 2  # 1 (no "format" key): the index's flat backups and the queues' own keys, rolled back still


def new_stamp() -> str:
    """``20261128T235959.123456789Z-4242``: when, to the nanosecond, and which process."""
    now = time.time_ns()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now // 10**9)) + f".{now % 10**9:09d}Z-{os.getpid()}"


def staging_root(store: Path | os.PathLike, area: str) -> Path:
    return Path(store) / f"{area}.rocketidx-staging"


def staging_dir(store: Path, area: str, stamp: str) -> Path:
    """Where a repair of ``area`` builds before it swaps (the build puts its files under ``<area>/`` there)."""
    return staging_root(store, area) / stamp


def backup_root(store: Path | os.PathLike, area: str) -> Path:
    return Path(store) / f"{area}.backup"


def clear_staging(store: Path, area: str, log) -> None:
    """A killed repair's build, never installed and rocketidx's own, goes (said in one line)."""
    root = staging_root(store, area)
    if root.is_dir():
        shutil.rmtree(root)
        log(f"removed an interrupted repair's staging ({root})")


def drop_empty_staging(store: Path, area: str) -> None:
    root = staging_root(store, area)
    if root.is_dir() and not any(root.iterdir()):
        root.rmdir()


@dataclass(frozen=True)
class Swap:
    """What one install does to ``STORE/<area>``. ``move_out``: files (paths relative to the area) that go to
    the backup, replaced or removed; ``move_in``: files of ``staged`` that come in (a file in both is
    replaced). ``checkpoint``: the fields set after the moves (``L.CHECKPOINT``'s names; none: untouched).
    ``note``: the caller's own facts, kept in the journal."""
    store: Path | os.PathLike  # a path or a BrokerStore
    area: str
    staged: Path
    move_out: tuple[str, ...]
    move_in: tuple[str, ...]
    checkpoint: dict[str, int] = field(default_factory=dict)
    note: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.area not in AREAS:
            raise ValueError(f"no such store area: {self.area!r}")


def install(swap: Swap, stamp: str) -> Path:
    """Swap ``swap``'s files in (their data synced by the build that made them); the backup directory."""
    store, area = Path(swap.store), swap.area
    root = store / area
    backup = backup_root(store, area) / stamp
    journal = {"format": JOURNAL_FORMAT, "area": area, "store": str(store), "started": time.time(),
               "move_out": list(swap.move_out), "move_in": list(swap.move_in),
               "checkpoint_existed": (store / "checkpoint").exists(), "checkpoint_fields": dict(swap.checkpoint),
               **swap.note}
    (backup / area).mkdir(parents=True)
    if journal["checkpoint_existed"]:
        shutil.copy2(store / "checkpoint", backup / "checkpoint")
        with open(backup / "checkpoint", "rb+") as f:  # on disk before the checkpoint it saves is replaced
            os.fsync(f.fileno())
    write_journal(backup, journal)
    fsync_dir(backup.parent)
    moved_out, moved_in = [], []
    touched: set[Path] = {root}
    with interrupts.deferred():
        root.mkdir(exist_ok=True)
        for rel in swap.move_out:
            dst = backup / area / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.rename(root / rel, dst)
            moved_out.append(rel)
            _progress(backup, moved_out, moved_in)
            touched.update(_dirs_between(root, root / rel))
        leaving = set(swap.move_out) - set(swap.move_in)
        for rel in leaving:  # a removed queue's emptied directories go too (never the area itself)
            for d in _dirs_between(root, root / rel):
                if d != root and d.is_dir() and not any(d.iterdir()):
                    d.rmdir()
        for rel in swap.move_in:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.rename(swap.staged / rel, root / rel)
            moved_in.append(rel)
            _progress(backup, moved_out, moved_in)
            touched.update(_dirs_between(root, root / rel))
        for d in sorted(touched, key=lambda p: -len(p.parts)):
            if d.is_dir():
                fsync_dir(d)
        for d in sorted({p.parent for p in (backup / area).rglob("*") if p.is_file()} | {backup / area, backup},
                        key=lambda p: -len(p.parts)):
            fsync_dir(d)
        if swap.checkpoint:
            write_checkpoint_fields(store, swap.checkpoint)
        journal.update(moved_to_backup=moved_out, installed=moved_in, finished=time.time())
        write_journal(backup, journal)
    (backup / "progress.json").unlink(missing_ok=True)
    return backup


def _dirs_between(root: Path, path: Path) -> list[Path]:
    """The directories from ``path``'s parent up to ``root``, both included."""
    out, d = [], path.parent
    while d != root and root in d.parents:
        out.append(d)
        d = d.parent
    return out + [root]


def _progress(backup: Path, moved_out: list, moved_in: list) -> None:
    """Counts only (a constant size, not synced): roll-back reads the journal's names, not this."""
    tmp = backup / "progress.json.tmp"
    tmp.write_text(json.dumps({"moved_to_backup": len(moved_out), "installed": len(moved_in)}))
    os.replace(tmp, backup / "progress.json")


def write_journal(backup: Path, journal: dict) -> None:
    """``backup/journal.json``, whole or not at all: temporary file, fsync, rename."""
    tmp = backup / "journal.json.tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(journal, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, backup / "journal.json")


def _moves(journal: dict, area: str) -> tuple[list[str], list[str]]:
    """(move_out, move_in) of a journal of any format."""
    if journal.get("format", 1) >= 2:
        return journal["move_out"], journal["move_in"]
    if area == "index":
        return journal["replace"], journal["install"]
    return journal["replace"] + journal["remove"], journal["replace"] + journal["write"]


def _moved_dir(backup: Path, journal: dict, area: str) -> Path:
    """Where a backup keeps the files that left the area (format 1 kept the index's flat)."""
    return backup if journal.get("format", 1) < 2 and area == "index" else backup / area


def interrupted(store: Path, area: str) -> list[tuple[Path, dict]]:
    """The swaps into ``STORE/<area>`` stopped (a kill, a power cut) between their journal and its
    ``finished``, oldest first."""
    root = backup_root(store, area)
    found = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        j = d / "journal.json"
        if not j.is_file():
            continue
        try:
            journal = json.loads(j.read_text())
        except (ValueError, UnicodeDecodeError) as e:  # a repair's journal is written whole or not at all
            raise StoreLayoutError(str(j), f"not a repair journal (JSON): {e}; move its backup directory out of "
                                           f"{root.name}/ once you have looked at it") from e
        if not isinstance(journal, dict) or "finished" in journal or "rolled_back" in journal:
            continue
        if "move_out" in journal or "replace" in journal:
            found.append((d, journal))
    return found


def roll_back(store: Path, area: str, backup: Path, journal: dict) -> None:
    """Undo an interrupted swap: files that came in leave the area (a file the swap replaced is new wherever
    its old one is in the backup), files that left come back, the checkpoint is the one from before; then
    the journal says ``rolled_back``. A broker that started in between saw at worst files it would have
    dropped anyway or damaged ones missing."""
    store = Path(store)
    root = store / area
    move_out, move_in = _moves(journal, area)
    saved = _moved_dir(backup, journal, area)
    left = set(move_out)
    for rel in move_in:
        here = root / rel
        if here.exists() and (rel not in left or (saved / rel).exists()):
            here.unlink()
    for rel in sorted(left):
        old = saved / rel
        if old.exists():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.rename(old, root / rel)
    for d in sorted([p for p in root.rglob("*") if p.is_dir()] + [root] if root.is_dir() else [],
                    key=lambda p: -len(p.parts)):
        fsync_dir(d)
    if (backup / "checkpoint").exists():
        restore_checkpoint(store, backup / "checkpoint")
    elif journal.get("checkpoint_existed") is False:
        (store / "checkpoint").unlink(missing_ok=True)
    fsync_dir(backup)
    fsync_dir(store)
    journal["rolled_back"] = time.time()
    write_journal(backup, journal)


def roll_back_interrupted(store: Path, area: str, dry_run: bool, log, what: str) -> list[str]:
    """Every interrupted swap of ``area`` undone, oldest first (a dry run only says it would, naming it by
    ``what``); the backups rolled back."""
    undone = []
    for backup, journal in interrupted(store, area):
        if dry_run:
            log(f"an interrupted {what} ({backup}) would be rolled back first")
            continue
        roll_back(store, area, backup, journal)
        undone.append(str(backup))
        log(f"rolled back an interrupted {what}: {backup} (its files are back in {area}/)")
    return undone


def restore_checkpoint(store: Path, saved: Path) -> None:
    """Put a swap's saved checkpoint back: a copy, fsync, rename over ``STORE/checkpoint``."""
    store = Path(store)
    tmp = store / "checkpoint.rocketidx-tmp"
    shutil.copyfile(saved, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, store / "checkpoint")
    fsync_dir(store)
