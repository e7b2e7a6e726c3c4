"""Key queries over a build output or a broker's ``store/index`` directory.

In: an index directory (a build output with ``_manifest.json``, its ``index/`` subdirectory, or a bare
directory of IndexFiles) and the sizes. Out: :class:`IndexFile` objects oldest first, and answers with
``IndexService.queryOffset`` semantics (:func:`rocketidx.indexfile.query_offsets`).
"""
from __future__ import annotations

import os
from pathlib import Path

from rocketidx import layout as L
from rocketidx.errors import StoreLayoutError
from rocketidx.indexfile import IndexFile, query_offsets
from rocketidx.output import INDEX_DIR, read_manifest


def open_index(path: str | os.PathLike, hash_slot_num: int | None = None, index_num: int | None = None
               ) -> list[IndexFile]:
    """The index files under ``path``, oldest first (manifest order, else name order, as the broker loads).

    Sizes come from the arguments, else the manifest, else the broker defaults.
    """
    p = Path(path)
    if not p.is_dir():
        raise StoreLayoutError(str(p), "not a directory")
    manifest = read_manifest(p)
    if manifest is None and p.name == INDEX_DIR:
        manifest = read_manifest(p.parent)
        if manifest is not None:
            p = p.parent
    if manifest is not None:
        hash_slot_num = hash_slot_num or manifest["hash_slot_num"]
        index_num = index_num or manifest["index_num"]
        names = [f["name"] for f in manifest["files"]]
        directory = p / INDEX_DIR
    else:
        directory = p / INDEX_DIR if (p / INDEX_DIR).is_dir() else p
        names = sorted(e.name for e in os.scandir(directory) if e.is_file() and not e.name.startswith("."))
    hash_slot_num = hash_slot_num or L.DEFAULT_HASH_SLOT_NUM
    index_num = index_num or L.DEFAULT_INDEX_NUM
    return [IndexFile(directory / n, hash_slot_num, index_num) for n in names]


__all__ = ["open_index", "query_offsets"]
