"""What a build reports: :class:`BuildSummary`, the manifest's header made from it, and what reading left unread.

Every build fills one :class:`BuildSummary` the same way, in :func:`rocketidx.build.finish.finish_build` (the
direct and shuffle plans, and the in-process one-pass build of :mod:`rocketidx.build.in_process`), so the summary
and the manifest of a build do not depend on the engine or plan that ran it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rocketidx.commitlog.segments import Segment
from rocketidx.config import BuildConfig
import rocketidx.layout as L
from rocketidx.output.manifest import MANIFEST_VERSION
import rocketidx.storage as storage


@dataclass
class BuildSummary:
    segments: int = 0
    bytes_read: int = 0
    messages: int = 0
    messages_indexed: int = 0
    rollback_skipped: int = 0
    below_end_phy_offset_skipped: int = 0
    below_end_first_offset: int | None = None  # CommitLog offset of the first record whose entries were skipped
    entries: int = 0
    windows: int = 0
    files: int = 0
    stop: dict | None = None
    stops: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    bytes_scanned: int = 0  # bytes the reader went through (less than bytes_read when a time index skipped some)
    time_index: str | None = None  # how a time slice used the time index, when it was asked to
    phy_mismatch: dict | None = None  # first record whose PHYSICALOFFSET is not its position: segment, offset
    consumequeue: dict | None = None  # with --targets consumequeue: queues, files, entries, what the rules dropped
    reader: str | None = None  # kernel, numpy or mixed: what the reads ran (rocketidx.commitlog.native.readers_of)
    # An incremental build's account (rocketidx.build.incremental.Reuse), or a full build's reason not to be one
    incremental: dict | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def unread(segments: list[Segment], stop: dict | None) -> tuple[int, int]:
    """(bytes, segments) of the log after a stop that ends reading early (an invalid record, or a zero
    tail before the last segment), as the broker's recovery would drop them too; (0, 0) otherwise."""
    if not stop or stop["kind"] not in ("corrupt", "end_of_data"):
        return 0, 0
    after = [s for s in segments if s.base_offset > stop["phy_offset"] - stop["segment_offset"]]
    if stop["kind"] == "end_of_data" and not after:
        return 0, 0  # the newest segment's zero tail: the normal end of a log
    here = next((s for s in segments if s.name == stop["segment"]), None)
    left = (here.size - stop["segment_offset"]) if here is not None and stop["kind"] == "corrupt" else 0
    return left + sum(s.size for s in after), len(after)


def manifest_header(config: BuildConfig, segments: list[Segment], summary: BuildSummary) -> dict:
    return {
        "version": MANIFEST_VERSION,
        "hash_slot_num": config.hash_slot_num,
        "index_num": config.index_num,
        "index_file_size": L.index_file_size(config.hash_slot_num, config.index_num),
        "window_ms": config.window_ms,
        "timezone": config.timezone,
        "check_crc": config.check_crc,
        # Resolved: a later build from another directory compares it with its own (output.safety.BuildKind).
        "commitlog": storage.redact(storage.resolve(segments[0].path)).rsplit("/", 1)[0] if segments else None,
        "segments": [{"name": s.name, "base_offset": s.base_offset, "size": s.size} for s in segments],
        "messages": summary.messages,
        "messages_indexed": summary.messages_indexed,
        "rollback_skipped": summary.rollback_skipped,
        "below_end_phy_offset_skipped": summary.below_end_phy_offset_skipped,
        "entries": summary.entries,
        "windows": summary.windows,
        "bytes_read": summary.bytes_read,
        "stop": summary.stop,
    } | ({"phy_mismatch": summary.phy_mismatch} if summary.phy_mismatch else {}) | (
        {"below_end_first_offset": summary.below_end_first_offset}
        if summary.below_end_first_offset is not None else {}) | (
        {"targets": list(config.targets)} if config.targets != ("index",) else {})
