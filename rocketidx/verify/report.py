"""What a verify found: problems per file and kind, each file's summary, and the listing order.

Stays true: counts are always complete; at most :data:`MAX_LISTED_PER_KIND` offsets are listed per file
and kind, in one fixed order whichever engine found them.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

import rocketidx.storage as storage


MAX_LISTED_PER_KIND = 20  # per file and kind; the counts are always complete


@dataclass
class Problem:
    file: str
    offset: int
    kind: str
    detail: str


@dataclass
class FileSummary:
    name: str
    entries: int
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    problems: int = 0


@dataclass
class VerifyReport:
    files: list[FileSummary] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    entries_checked: int = 0
    expected_entries: int | None = None
    covered_range: tuple[int, int] | None = None
    log_mismatch: str | None = None  # why the index is not the CommitLog's (rocketidx.query.logmatch), if it is not
    gaps: list[dict] = field(default_factory=list)  # stretches of the log in no file (rocketidx.verify.coverage)
    expired_items: int = 0  # items below the log's first offset: their messages went to retention (not judged)

    @property
    def clean(self) -> bool:
        return not self.counts and self.log_mismatch is None

    def add(self, file: str, offsets, kind: str, detail) -> None:
        """Record problems of one kind at the given byte offsets (detail: str or one str per offset)."""
        offsets = np.atleast_1d(np.asarray(offsets, np.int64))
        if len(offsets) == 0:
            return
        file = storage.redact(file)  # a URI's user part and options may hold keys
        self.counts[kind] += len(offsets)
        for i, off in enumerate(offsets[:MAX_LISTED_PER_KIND].tolist()):
            d = detail[i] if isinstance(detail, (list, tuple)) else detail
            self.problems.append(Problem(file, int(off), kind, d))
        if len(offsets) > MAX_LISTED_PER_KIND:
            self.problems.append(Problem(file, int(offsets[MAX_LISTED_PER_KIND]), kind,
                                         f"... and {len(offsets) - MAX_LISTED_PER_KIND} more"))

    def as_dict(self) -> dict:
        return {"clean": self.clean, "counts": dict(self.counts), "entries_checked": self.entries_checked,
                "expected_entries": self.expected_entries, "covered_range": self.covered_range, "gaps": self.gaps,
                "expired_items": self.expired_items,
                "log_mismatch": self.log_mismatch, "files": [asdict(f) for f in self.files],
                "problems": [asdict(p) for p in self.problems]}


PER_FILE_KINDS = ("not-a-message", "time-diff", "header-time", "window")  # content kinds listed file by file
CROSS_FILE_KINDS = ("extra", "missing")  # then these, each over every file


def listing_order(n_files: int) -> list[tuple[int, str]]:
    """(file, kind) in the order a report lists content problems, both verifies."""
    return ([(fi, k) for fi in range(n_files) for k in PER_FILE_KINDS]
            + [(fi, k) for k in CROSS_FILE_KINDS for fi in range(n_files)])
