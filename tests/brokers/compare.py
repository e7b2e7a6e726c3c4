"""A real broker's derived files against rocketidx's: ConsumeQueue files by path and bytes, IndexFiles by
content in name order (the broker names each by its wall clock when it opens it, rocketidx by the first
entry's store time, so names never match)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

INDEX_HEADER = 40


@dataclass
class Tally:
    same: int = 0
    total: int = 0
    differ: list[str] = field(default_factory=list)
    unloaded: list[str] = field(default_factory=list)  # files the broker's own load never opens

    def add(self, name: str, ok: bool) -> None:
        self.total += 1
        self.same += ok
        if not ok:
            self.differ.append(name)

    def __str__(self) -> str:
        return f"{self.same}/{self.total}"


def queue_files(root: Path, area: str = "consumequeue") -> dict[str, bytes]:
    cq = root / area
    return {str(p.relative_to(cq)): p.read_bytes() for p in sorted(cq.rglob("*")) if p.is_file()}


def loaded(name: str) -> bool:
    """Whether the broker's load opens queue file ``name`` (topic/queueId/file): loadConsumeQueue lists
    consumequeue/<topic>/<queueId>/ and skips a queue directory whose name is not an int, such as the
    nested one a 4.9 broker writes for a light queue whose name holds '/' (%LMQ%a/b -> %LMQ%a/b/0/)."""
    parts = name.split("/")
    try:
        int(parts[1])
    except (IndexError, ValueError):
        return False
    return len(parts) == 3


def compare_queues(broker_store: Path, built: Path, area: str = "consumequeue") -> Tally:
    """Every queue file either side has under ``area`` (consumequeue, batchconsumequeue), byte for byte; a file
    only one side has counts as a difference. A broker file its own load never opens is left out and listed
    (``unloaded``)."""
    ours, theirs = queue_files(built, area), queue_files(broker_store, area)
    tally = Tally()
    for name in sorted(set(ours) | set(theirs)):
        if name not in ours and not loaded(name):
            tally.unloaded.append(name)
            continue
        tally.add(name, ours.get(name) == theirs.get(name))
    return tally


def index_used(data: bytes) -> int:
    """indexCount of an IndexFile's header (1 for a file with no entry: slot 0 of the list is never used)."""
    return int.from_bytes(data[36:40], "big") if len(data) >= INDEX_HEADER else 0


def index_files(directory: Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(directory.iterdir()) if p.is_file() and p.name.isdigit()]


def compare_index(broker_index: Path, built_index: Path) -> tuple[Tally, int]:
    """IndexFiles paired in name order, compared by content. The broker opens its next file when the last
    fills, before any entry goes in, and a clean shutdown can leave that file holding no entry; rocketidx
    never writes one. Such a trailing file of the broker's with indexCount <= 1 is left out and counted
    (the second value); any other unpaired file is a difference."""
    theirs, ours = index_files(broker_index), index_files(built_index)
    empty_tail = 0
    while len(theirs) > len(ours) and index_used(theirs[-1][1]) <= 1:
        theirs.pop()
        empty_tail += 1
    tally = Tally()
    for i in range(max(len(theirs), len(ours))):
        a = theirs[i] if i < len(theirs) else None
        b = ours[i] if i < len(ours) else None
        name = f"{a[0] if a else '-'}~{b[0] if b else '-'}"
        tally.add(name, a is not None and b is not None and a[1] == b[1])
    return tally, empty_tail
