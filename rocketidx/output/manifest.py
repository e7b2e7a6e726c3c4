"""A build output's manifest (``OUT/_manifest.json``): one typed record, parsed and written only here.

In: the build's header (:func:`rocketidx.build.summary.manifest_header`: format version, sizes, window, time
zone, the segments read, counts, where reading stopped; a filtered Spark build adds ``filters``) and one
:class:`ManifestFile` row per committed file; or the JSON text of a manifest written before.
Out: :class:`Manifest`, whose attributes readers use (``hash_slot_num``, ``index_num``, ``window_ms``,
``files``, ``names``, ``window_ids``; the rest of the header is the build's record, kept as written),
and its JSON (:meth:`Manifest.to_json`).

Stays true: the JSON is what rocketidx has always written, byte for byte: ``json.dumps(..., indent=2)``
plus a newline, the header's keys in the order the build gave them, then ``files``, each row's keys in
:class:`ManifestFile`'s field order. A manifest read and written again gives the same bytes; header keys
this module does not name are kept as they are (the header is the build's to extend). A manifest that is
not one raises :class:`rocketidx.errors.StoreLayoutError` naming it.

Where it sits: ``OUT/_manifest.json`` beside ``OUT/index/`` (:data:`MANIFEST`, :data:`INDEX_DIR`);
:mod:`rocketidx.output.local` writes it at the commit and reads it through a URI's ``CURRENT`` pointer.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Sequence

from rocketidx.errors import StoreLayoutError

MANIFEST = "_manifest.json"  # OUT/_manifest.json
INDEX_DIR = "index"  # OUT/index/<files>
CONSUMEQUEUE_DIR = "consumequeue"  # OUT/consumequeue/<topic>/<queueId>/<files>
# Where a build output's committed version is named (rocketidx.output.local writes them, every reader follows them):
VERSION_PREFIX = ".v-"  # OUT/.v-<id>/: one build's files and manifest
CURRENT = "current"  # the local layout's pointer: a symlink to the version directory
CURRENT_FILE = "CURRENT"  # the remote layout's pointer; a file, not a symlink


def version_named(pointer: bytes, where: str) -> str:
    """The version directory a ``CURRENT`` pointer's bytes name; anything but a ``.v-<id>`` name (a path
    elsewhere, garbage) is a :class:`StoreLayoutError` naming ``where``."""
    name = pointer.decode(errors="replace").strip()
    if not name.startswith(VERSION_PREFIX) or "/" in name:
        raise StoreLayoutError(where, f"names {name!r}, not a version directory")
    return name
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class ManifestFile:
    """One committed IndexFile: its name, window and place in it, and its header as written."""

    name: str
    window_id: int
    window_start_ms: int
    seq: int
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int
    entries: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def committed(cls, info, name: str) -> "ManifestFile":
        """The row of a written file (a :class:`rocketidx.index.writer.FileInfo`) under its committed name."""
        h = info.header
        return cls(name, info.window_id, info.window_start_ms, info.seq, h.begin_timestamp, h.end_timestamp,
                   h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count, h.index_count, info.entries)


_FILE_KEYS = tuple(f.name for f in fields(ManifestFile))


@dataclass(frozen=True)
class Manifest:
    """A build output's manifest. ``header``: every key but ``files``, in the order written (read it
    through the attributes; it is not to be changed); ``files``: the committed files, oldest first
    (window, then sequence)."""

    header: Mapping[str, Any]
    files: tuple[ManifestFile, ...]

    @classmethod
    def build(cls, header: Mapping[str, Any], files: Sequence[ManifestFile]) -> Manifest:
        """A new manifest: the build's header (any ``files`` key in it is replaced) and its file rows."""
        return cls(dict(header), tuple(files))

    # -- what readers use -------------------------------------------------------------------------

    @property
    def hash_slot_num(self) -> int | None:
        return self.header.get("hash_slot_num")

    @property
    def index_num(self) -> int | None:
        return self.header.get("index_num")

    @property
    def window_ms(self) -> int | None:
        """The window length the build used (0: one window); None in a header that does not say."""
        return self.header.get("window_ms")

    @property
    def names(self) -> list[str]:
        """The files' names, oldest first."""
        return [f.name for f in self.files]

    @property
    def window_ids(self) -> list[int]:
        return [f.window_id for f in self.files]

    def file(self, name: str) -> ManifestFile | None:
        """The row of the file called ``name``, or None."""
        return next((f for f in self.files if f.name == name), None)

    # -- JSON --------------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The manifest as plain JSON values (what ``build_index`` returns and the JSON holds)."""
        return dict(self.header, files=[f.to_dict() for f in self.files])

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = MANIFEST) -> Manifest:
        """A manifest from its JSON values; ``source`` names it in the error a malformed one raises."""
        if not isinstance(d, Mapping):
            raise StoreLayoutError(source, f"not a manifest: a JSON {type(d).__name__}, not an object")
        rows = d.get("files", [])
        if not isinstance(rows, list):
            raise StoreLayoutError(source, "not a manifest: \"files\" is not a list")
        files = []
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping) or set(row) != set(_FILE_KEYS):
                raise StoreLayoutError(source, f"not a manifest: files[{i}] does not have the keys "
                                               f"{', '.join(_FILE_KEYS)}")
            files.append(ManifestFile(**row))
        return cls({k: v for k, v in d.items() if k != "files"}, tuple(files))

    @classmethod
    def from_json(cls, text: str | bytes, source: str = MANIFEST) -> Manifest:
        try:
            d = json.loads(text)
        except ValueError as e:
            raise StoreLayoutError(source, f"not a manifest: {e}") from e
        return cls.from_dict(d, source)

    @classmethod
    def read(cls, directory: str | os.PathLike) -> Manifest | None:
        """The manifest in ``directory`` (a local path or a URI: ``directory/_manifest.json``), or None if
        it has none."""
        import rocketidx.storage as storage
        p = storage.join(storage.normalize(directory), MANIFEST)
        data = storage.read_bytes(p)
        return None if data is None else cls.from_json(data, storage.redact(p))


__all__ = ["CURRENT", "CURRENT_FILE", "INDEX_DIR", "MANIFEST", "MANIFEST_VERSION", "VERSION_PREFIX", "Manifest",
           "ManifestFile", "version_named"]
