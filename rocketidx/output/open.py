"""Opening an index where it lies: a build output (pinned to one committed version), its ``index/``, or a
broker's ``store/index``.

In: a path or URI, optional sizes. Out: :class:`IndexDir` (:func:`open_index_dir`): the files oldest
first and the sizes, resolved by one rule (argument, manifest, the files, the broker's default).
Stays true: a build output's manifest and files come from one version even while a build swaps it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from rocketidx.errors import StoreLayoutError
from rocketidx.index.reader import IndexFile, infer_sizes
import rocketidx.layout as L
from rocketidx.consumequeue.reader import ConsumeQueues
from rocketidx.output.manifest import (CONSUMEQUEUE_DIR, CURRENT, CURRENT_FILE, INDEX_DIR, MANIFEST, Manifest, version_named)
import rocketidx.storage as storage

SIZE_SOURCES = ("argument", "manifest", "files", "default")  # where a size comes from, first found wins


@dataclass(frozen=True)
class IndexDir:
    """An index directory as every reader opens it (:func:`open_index_dir`).

    ``directory``: where the files are (``OUT/index`` of a build output, else the directory itself);
    ``names``: its IndexFiles, oldest first (the manifest's order, else name order, as the broker loads
    them); the sizes they were written with, and where each came from (one of :data:`SIZE_SOURCES`);
    ``manifest``: the build's :class:`rocketidx.output.manifest.Manifest`, None for a bare directory.
    """

    directory: str
    names: tuple[str, ...]
    hash_slot_num: int
    index_num: int
    hash_slot_num_from: str
    index_num_from: str
    manifest: Manifest | None = None

    @property
    def paths(self) -> list[str]:
        return [storage.join(self.directory, n) for n in self.names]

    def open(self, *, check: bool = True) -> list[IndexFile]:
        """Every file, oldest first; a file of the wrong size (or, with ``check``, a bad header) raises
        :class:`CorruptIndexError` naming it."""
        return [IndexFile(p, self.hash_slot_num, self.index_num, check=check) for p in self.paths]


def _pinned(p: str) -> str:
    """A build output's committed version directory, resolved once, so that its manifest and its files come
    from one version even while a build swaps it: the local layout's ``OUT/current`` symlink, or the
    remote layout's ``OUT/CURRENT`` file (a URI, or a ``file://`` output written by an earlier release);
    any other directory as it is."""
    parent = storage.parent(p) if storage.basename(p) == INDEX_DIR else None
    for root in (p, parent):
        if root is None:
            continue
        # Only the layout a build leaves: a hand-placed _manifest.json (not a link) is read as it is.
        target = storage.readlink(storage.join(root, CURRENT))
        if target is not None and storage.readlink(storage.join(root, MANIFEST)) is not None:
            return storage.join(root, target)
        pointer = storage.read_bytes(storage.join(root, CURRENT_FILE)) \
            if storage.stat(storage.join(root, MANIFEST)) is None else None
        if pointer is not None:
            return storage.join(root, version_named(pointer, storage.redact(storage.join(root, CURRENT_FILE))))
    return p


def open_index_dir(path: str | os.PathLike, hash_slot_num: int | None = None, index_num: int | None = None,
                   *, missing_ok: bool = False) -> IndexDir:
    """The index under ``path`` (a local path or a URI): a build output (with ``_manifest.json``, or
    the remote layout's ``CURRENT``), its ``index/`` directory, or a bare directory of IndexFiles such as
    a broker's ``store/index``. Nothing is opened yet.

    Each size comes from the argument, else the manifest, else what a bare directory's files tell
    (:func:`infer_sizes`), else the broker default (``MessageStoreConfig``): the one place that says so.
    The files are the manifest's, else every regular file whose name does not start with a dot. A path
    that is not a directory raises :class:`StoreLayoutError`, unless ``missing_ok`` (a broker store with
    no ``index/`` yet): then there are no files, and the sizes are the arguments' or the defaults.
    """
    p = storage.normalize(path)
    shown = storage.redact(p)
    manifest = None
    sizes: list[int] | None = None
    found = storage.stat(p)
    if found is None or found.kind != storage.DIR:
        if not missing_ok:
            raise StoreLayoutError(shown, "not a directory" if found is not None else "no such directory")
        directory, names = p, []
    else:
        p = _pinned(p)
        manifest = Manifest.read(p)
        if manifest is None and storage.basename(p) == INDEX_DIR:
            parent = storage.parent(p)
            manifest = Manifest.read(parent)
            p = parent if manifest is not None else p
        if manifest is not None:
            directory, names = storage.join(p, INDEX_DIR), manifest.names
        else:
            entries = {e.name: e for e in storage.listdir(p)}
            if INDEX_DIR not in entries and "commitlog" in entries and entries["commitlog"].kind == storage.DIR \
                    and not missing_ok:
                raise StoreLayoutError(shown, "a store with a commitlog/ but no index/ directory: nothing is "
                                              "indexed here yet (rocketidx build or backfill makes one)")
            if INDEX_DIR in entries and entries[INDEX_DIR].kind == storage.DIR:
                directory = storage.join(p, INDEX_DIR)
                entries = {e.name: e for e in storage.listdir(directory)}
            else:
                directory = p
            files = [e for e in entries.values() if e.kind == storage.FILE and not e.name.startswith(".")]
            names = sorted(e.name for e in files)
            sizes = [entries[n].size for n in names]
    if manifest is not None:
        told = (manifest.hash_slot_num, manifest.index_num)
    else:
        told = infer_sizes([storage.join(directory, n) for n in names], hash_slot_num, index_num, sizes=sizes)
    told_by = "manifest" if manifest is not None else "files"
    resolved = []
    for given, known, default in zip((hash_slot_num, index_num), told, (L.DEFAULT_HASH_SLOT_NUM, L.DEFAULT_INDEX_NUM)):
        resolved.append(next((v, source) for v, source in ((given, "argument"), (known, told_by), (default, "default"))
                             if v))
    (hs, hs_from), (n, n_from) = resolved
    return IndexDir(str(directory), tuple(names), hs, n, hs_from, n_from, manifest)


def open_consumequeues(path: str | os.PathLike, commitlog: str | os.PathLike | None = None) -> ConsumeQueues:
    """The ConsumeQueues under ``path`` as a restarted broker loads them: a build output (its manifest gives
    the CommitLog's first offset), a broker store (its ``commitlog/`` gives it), or a bare ``consumequeue``
    directory, which needs ``commitlog``. A given ``commitlog`` wins: lookups depend on its first offset."""
    from rocketidx.commitlog.segments import list_segments
    p = storage.normalize(path)
    if storage.is_remote(p):
        raise StoreLayoutError(storage.redact(p), "ConsumeQueues are read from a local path so far")
    if not os.path.isdir(p):
        raise StoreLayoutError(p, "no such directory")
    pinned = _pinned(p)
    manifest = Manifest.read(pinned)
    queues_dir, min_offset = None, None
    if manifest is not None:
        info = manifest.header.get("consumequeues")
        if info is None:
            raise StoreLayoutError(p, "a build output without ConsumeQueues (build it with --targets consumequeue)")
        queues_dir, min_offset = os.path.join(pinned, CONSUMEQUEUE_DIR), info["commitlog_min_offset"]
    elif os.path.isdir(os.path.join(p, CONSUMEQUEUE_DIR)):
        queues_dir = os.path.join(p, CONSUMEQUEUE_DIR)
        if commitlog is None and os.path.isdir(os.path.join(p, "commitlog")):
            commitlog = os.path.join(p, "commitlog")
    elif os.path.isdir(os.path.join(p, "commitlog")):
        raise StoreLayoutError(p, NO_QUEUES)
    else:
        queues_dir = p
    if commitlog is not None:
        segments = list_segments(commitlog)
        min_offset = segments[0].base_offset if segments else 0
    if min_offset is None:
        raise StoreLayoutError(p, "a bare consumequeue directory: give --commitlog, whose first offset decides "
                                  "which entries a restarted broker still serves")
    from rocketidx.consumequeue.rocksdb import RocksQueues, is_rocksdb
    if is_rocksdb(queues_dir):  # a storeType=defaultRocksDB broker's database, opened read-only
        return RocksQueues(queues_dir, min_offset)
    return ConsumeQueues(queues_dir, min_offset)


NO_QUEUES = ("a broker store without consumequeue/: it holds no ConsumeQueues (verify --store reports each queue "
             "its log dispatches as missing; backfill --store rebuilds them)")


def consumequeue_dir(path: str | os.PathLike) -> str:
    """The ``consumequeue`` directory of a build output (its committed version's), of a broker store, or the
    directory itself."""
    p = storage.normalize(path)
    if storage.is_remote(p):
        raise StoreLayoutError(storage.redact(p), "ConsumeQueues are read from a local path so far")
    if not os.path.isdir(p):
        raise StoreLayoutError(p, "no such directory")
    pinned = _pinned(p)
    inside = os.path.join(pinned, CONSUMEQUEUE_DIR)
    if Manifest.read(pinned) is not None and not os.path.isdir(inside):
        raise StoreLayoutError(p, "a build output without ConsumeQueues (build it with --targets consumequeue)")
    if not os.path.isdir(inside) and os.path.isdir(os.path.join(p, "commitlog")):
        raise StoreLayoutError(p, NO_QUEUES)
    return inside if os.path.isdir(inside) else p
