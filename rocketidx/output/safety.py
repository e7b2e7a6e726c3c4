"""What the commands and jobs check before they write an output: where it is, and what it replaces.

In: a command's ``--out`` (or ``--time-index``) and the build it is about to run (:class:`BuildKind`:
the CommitLog directory, the offset/time range, the window and the file sizes).
Out: nothing when the write is safe; otherwise a :class:`rocketidx.errors.UnsafeOutputError` (or a
:class:`rocketidx.errors.ConfigError` for an inverted range) raised before anything is created, not even
a lock file.

Stays true:
- a local output never lands in a broker's store: a broker opens every file in ``store/index`` as an
  IndexFile and owns the rest of the store, so ``--out`` may be neither a store nor inside one
  (``backfill`` is the one command that writes into a store, through its own staging);
- an existing directory becomes an output only when it is empty or holds rocketidx's own files;
- a build replaces a committed output only when it is the same kind of build (same CommitLog directory,
  range, window and sizes; a log that grew or lost old segments is the same log), unless ``--overwrite``
  says otherwise, as Spark's ``errorifexists`` save mode does.
The library's ``build_index`` does none of this: its callers (backfill, tests, notebooks) choose their
directories; these checks are for a person typing a command.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rocketidx.errors import ConfigError, UnsafeOutputError
from rocketidx.output.manifest import CONSUMEQUEUE_DIR, CURRENT, CURRENT_FILE, INDEX_DIR, MANIFEST, VERSION_PREFIX
import rocketidx.storage as storage

# A broker store's own entries (what RocketMQ keeps under storePathRootDir). ``index`` counts only as a real directory
# holding IndexFiles: a rocketidx output's ``index`` is a symlink into its current version.
BROKER_DIRS = ("commitlog", "consumequeue")
BROKER_FILES = ("checkpoint", "abort", "lock")
INDEX_FILE_NAME = re.compile(r"^\d{17}$")  # yyyyMMddHHmmssSSS

# What a rocketidx output may hold: its pointer, links, versions, lock, marker and time index, and the
# temporary names a killed commit can leave (output.py writes "<name>.tmp" and "<name>.tmp-<id>").
OWN_NAMES = frozenset({".lock", CURRENT, CURRENT_FILE, INDEX_DIR, CONSUMEQUEUE_DIR, MANIFEST, "_SUCCESS",
                       "_timeindex"})
OWN_PREFIXES = (VERSION_PREFIX, f"{CURRENT}.tmp", f"{CURRENT_FILE}.tmp", f"{INDEX_DIR}.tmp", f"{CONSUMEQUEUE_DIR}.tmp",
                f"{MANIFEST}.tmp", "_SUCCESS.tmp")
TIME_INDEX_SUFFIXES = (".tix", ".tix.tmp")


def broker_files(directory: Path) -> list[str]:
    """The broker's entries in ``directory`` (empty when it is not a store or does not exist)."""
    found = [d for d in BROKER_DIRS if (directory / d).is_dir() and not (directory / d).is_symlink()]
    found += [f for f in BROKER_FILES if (directory / f).is_file()]
    index = directory / INDEX_DIR
    if index.is_dir() and not index.is_symlink() and any(INDEX_FILE_NAME.match(n) for n in os.listdir(index)):
        found.append("index/ with IndexFiles")
    return found


def _store_holding(path: Path) -> tuple[Path, list[str]] | None:
    """The nearest of ``path`` and its ancestors that holds broker files, with what it holds."""
    for d in (path, *path.parents):
        try:
            found = broker_files(d)
        except OSError:  # an unreadable ancestor tells nothing
            continue
        if found:
            return d, found
    return None


def check_not_in_store(path: str, flag: str) -> None:
    """Refuse a local ``path`` that is, or is inside, a broker's store directory."""
    if storage.is_remote(path):
        return
    target = Path(os.path.abspath(path))
    held = _store_holding(target)
    if held is None:
        return
    store, found = held
    where = "is" if store == target else f"is inside {store}, which is"
    raise UnsafeOutputError(path, f"{flag} {where} a broker's store (it holds {', '.join(found)}): a broker opens "
                                  "every file in store/index as an IndexFile and owns the rest, so rocketidx writes "
                                  "outputs elsewhere; `rocketidx backfill --store STORE` is the one way to repair a "
                                  "store's index")


def check_output_dir(out: str) -> None:
    """``--out``: not in a store, and empty, new, or a rocketidx output (only rocketidx's own files)."""
    check_not_in_store(out, "--out")
    if storage.is_remote(out):
        return
    p = Path(out)
    if not p.is_dir():
        return  # new (created by the build), or a file (the build's own error names it)
    foreign = sorted(n for n in os.listdir(p) if n not in OWN_NAMES and not n.startswith(OWN_PREFIXES))
    foreign += [n for n in (INDEX_DIR, CONSUMEQUEUE_DIR, MANIFEST) if (p / n).exists() and not (p / n).is_symlink()]
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UnsafeOutputError(out, f"--out is a directory that is not a rocketidx output (it holds {shown}): "
                                     "give a new or empty directory, or an earlier build's output")


def check_time_index_dir(tdir: str) -> None:
    """``--time-index``: not in a store, and new, empty or holding only time index files."""
    check_not_in_store(tdir, "--time-index")
    p = Path(tdir)
    if storage.is_remote(tdir) or not p.is_dir():
        return
    foreign = sorted(n for n in os.listdir(p) if not n.endswith(TIME_INDEX_SUFFIXES))
    if foreign:
        raise UnsafeOutputError(tdir, f"--time-index is a directory holding other files than a time index "
                                      f"({', '.join(foreign[:3])}): give a build output's _timeindex or a new directory")


def check_range(from_offset: int | None, to_offset: int | None, from_time_ms: int | None,
                to_time_ms: int | None) -> None:
    """An empty or inverted range is a usage error, before anything is read (both ends are half-open:
    ``--to-*`` is exclusive, so ``from >= to`` selects nothing)."""
    for name, lo, hi in (("offset", from_offset, to_offset), ("time", from_time_ms, to_time_ms)):
        if lo is not None and hi is not None and lo >= hi:
            raise ConfigError(f"--to-{name}", hi, f"must be greater than --from-{name} {lo}: the range "
                                                  f"[{lo}, {hi}) selects nothing")


@dataclass(frozen=True)
class BuildKind:
    """What makes two builds the same kind: the CommitLog directory, the range, the window, the sizes, and
    the targets with the queue file size (a build that would drop a target the output holds is another kind)."""

    commitlog: str | None
    filters: dict
    window_ms: int
    hash_slot_num: int
    index_num: int
    targets: tuple[str, ...] = ("index",)
    queue_file_size: int | None = None  # with the consumequeue target

    @classmethod
    def of_manifest(cls, header) -> BuildKind:
        queues = header.get("consumequeues")
        return cls(header.get("commitlog"), dict(header.get("filters") or {}), header.get("window_ms"),
                   header.get("hash_slot_num"), header.get("index_num"), tuple(header.get("targets") or ("index",)),
                   queues.get("file_size") if queues else None)

    def differences(self, other: BuildKind) -> list[str]:
        """How ``other`` (the output's build) differs from this one, in words; empty when it does not."""
        said = []
        if not _same_log(self.commitlog, other.commitlog):
            said.append(f"CommitLog {other.commitlog} (this build reads {self.commitlog})")
        if self.filters != other.filters:
            said.append(f"range {_range_words(other.filters)} (this build: {_range_words(self.filters)})")
        if self.window_ms != other.window_ms:
            said.append(f"window {other.window_ms} ms (this build: {self.window_ms} ms)")
        for name in ("hash_slot_num", "index_num"):
            if getattr(self, name) != getattr(other, name):
                said.append(f"{name} {getattr(other, name)} (this build: {getattr(self, name)})")
        dropped = [t for t in other.targets if t not in self.targets]
        if dropped:
            said.append(f"targets {','.join(other.targets)} (this build writes {','.join(self.targets)}, "
                        f"dropping {','.join(dropped)})")
        if "consumequeue" in self.targets and other.queue_file_size not in (None, self.queue_file_size):
            said.append(f"ConsumeQueue files of {other.queue_file_size} bytes (this build: {self.queue_file_size})")
        return said


def _same_log(a: str | None, b: str | None) -> bool:
    """Whether this build's CommitLog directory ``a`` (resolved at the command's entry) is the one the
    output's manifest records, ``b``."""
    if a == b or a is None or b is None:  # None: a build that read no segment names no directory
        return True
    if storage.is_remote(a) or storage.is_remote(b):
        return a.rstrip("/") == b.rstrip("/")
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return not os.path.isabs(b) and _ends_with(a, b)


def _ends_with(a: str, relative: str) -> bool:
    """A manifest of an older rocketidx (before issue 31) recorded the path as typed (``nc/store/commitlog``),
    relative to a working directory it did not record. All it says is the directory's last names, so the
    log is the same when ``a`` (as given, or with its symlinks resolved) ends with them: the cron job that
    runs from another directory is not refused. A record of fewer than two names (``./commitlog``, typed
    inside the store) would match every store's log: it matches none, and ``--overwrite`` replaces such an
    output once."""
    names = [n for n in os.path.normpath(relative).split(os.sep) if n not in (".", "..")]
    if len(names) < 2:
        return False
    return any(Path(p).parts[-len(names):] == tuple(names) for p in (os.path.abspath(a), os.path.realpath(a)))


def _range_words(filters: dict) -> str:
    if not filters:
        return "the whole log"
    return ", ".join(f"{k}={v}" for k, v in sorted(filters.items()))


def check_replace(out: str, kind: BuildKind, overwrite: bool) -> None:
    """Refuse to replace a committed output built by another kind of build, unless ``overwrite``."""
    from rocketidx.output.target import open_manifest
    if overwrite or (not storage.is_remote(out) and not os.path.isdir(out)):
        return  # nothing to replace (a file named as --out is the build's own error)
    try:
        manifest = open_manifest(out)
    except FileNotFoundError:
        return
    if manifest is None:
        return
    said = kind.differences(BuildKind.of_manifest(manifest.header))
    if said:
        raise UnsafeOutputError(storage.redact(out), "holds a build of another kind: " + "; ".join(said) +
                                ". Pass --overwrite to replace it, or give another --out (a slice can reuse a "
                                "whole build's time index with --time-index WHOLE_OUT/_timeindex)")
