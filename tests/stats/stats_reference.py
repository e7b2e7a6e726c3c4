"""Reference computations for the statistics tests, written without rocketidx.

IndexFiles are parsed with ``struct`` from the spec's layout (written out below, not imported from
``rocketidx.layout``), chains are walked link by link from each slot head, and key hashes are Java's
``String.hashCode`` computed one UTF-16 unit at a time (``scenarios.java_key_hash``, the tests' one copy).
Slow and obvious on purpose: these are the expectations the vectorised code is checked against.

IndexFile (big-endian)::

    | header 40 B | hashSlotNum x 4 B slots | indexNum x 20 B items |
    header: >q beginTimestamp >q endTimestamp >q beginPhyOffset >q endPhyOffset >i hashSlotCount >i indexCount
    item:   >i keyHash >q phyOffset >i timeDiff >i prevIndex
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from refdata import GOLDEN  # the one definition of where the reference cases live
from scenarios import java_key_hash  # noqa: F401 - the tests' one Java hash reference, re-exported

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ITEM = struct.Struct(">iqii")


@dataclass
class RefFile:
    path: Path
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int
    slots: list[int]
    items: list[tuple[int, int, int, int]]  # index 0 included (never used)


def read_file(path: Path, hash_slot_num: int, index_num: int) -> RefFile:
    data = Path(path).read_bytes()
    assert len(data) == HEADER.size + SLOT.size * hash_slot_num + ITEM.size * index_num
    h = HEADER.unpack_from(data, 0)
    slots = [SLOT.unpack_from(data, HEADER.size + 4 * s)[0] for s in range(hash_slot_num)]
    base = HEADER.size + SLOT.size * hash_slot_num
    items = [ITEM.unpack_from(data, base + ITEM.size * i) for i in range(h[5])]
    return RefFile(Path(path), *h, slots, items)


def chain_lengths(f: RefFile) -> dict[int, int]:
    """slot -> number of items reached by following prevIndex from the slot's head."""
    out = {}
    for s, head in enumerate(f.slots):
        if head <= 0 or head >= f.index_count:
            continue
        n, i = 0, head
        while True:
            n += 1
            prev = f.items[i][3]
            if prev <= 0 or prev >= i:
                break
            i = prev
        out[s] = n
    return out


def nearest_rank(values: list[int], q: float) -> int:
    s = sorted(values)
    k = -(-q * len(s) // 100)  # ceil without floats
    return s[max(1, int(k)) - 1]


@dataclass
class GoldenCase:
    name: str
    dir: Path
    hash_slot_num: int
    index_num: int
    window_ms: int
    manifest: dict

    @property
    def index_dir(self) -> Path:
        return self.dir / "expected" / "index"

    @property
    def commitlog(self) -> Path:
        return self.dir / "commitlog"

    def files(self) -> list[RefFile]:
        ordered = sorted(self.manifest["files"], key=lambda f: (f["window"], f["seq"]))
        return [read_file(self.index_dir / f["name"], self.hash_slot_num, self.index_num) for f in ordered]

    def messages(self) -> list[dict]:
        with open(self.dir / "messages.jsonl") as fh:
            return [json.loads(line) for line in fh if line.strip()]


def golden_case(name: str) -> GoldenCase:
    d = GOLDEN / name
    case = json.loads((d / "case.json").read_text())
    manifest = json.loads((d / "expected" / "manifest.json").read_text())
    return GoldenCase(name, d, case["hashSlotNum"], case["indexNum"], case["windowMillis"], manifest)


GOLDEN_NAMES = sorted(p.name for p in GOLDEN.glob("*") if (p / "case.json").exists())
