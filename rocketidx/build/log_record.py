"""What a whole log's build records in its manifest for a later, incremental build
(:mod:`rocketidx.build.incremental`): the settings that change the bytes, and each segment read with where the
read ended, how it stopped and a fingerprint of the bytes read. Apart from the incremental build so that the
finish of a full build can write it without importing the incremental build (which uses the finish)."""

from __future__ import annotations

from rocketidx.commitlog.entries import tag_entries_on
from rocketidx.commitlog.segments import Segment, open_segment
from rocketidx.commitlog.timeindex import _fingerprint
from rocketidx.config import BuildConfig
from rocketidx.index.windows import render_name
import rocketidx.storage as storage

KEY = "incremental"  # the manifest's record of what a later build needs


def settings_of(config: BuildConfig) -> dict:
    """Every setting that changes the bytes of an output, resolved: two builds whose settings are equal
    write the same files from the same log. The time zone is recorded by what it makes of two instants
    (its offset in winter and in summer), so ``local`` on another host with another zone differs."""
    tz = config.tzinfo
    return {"hash_slot_num": config.hash_slot_num, "index_num": config.index_num, "window_ms": config.window_ms,
            "timezone": [render_name(0, tz), render_name(15_552_000_000, tz)], "check_crc": config.check_crc,
            "targets": list(config.targets),
            "queue_file_size": config.queue_file_size if config.consumequeue else None,
            "delay_levels": config.delay_levels if config.consumequeue else None,
            "light_queues": repr(config.light_queues) if config.consumequeue else None,
            "batch_topics": list(config.batch_topics), "batch_file_size": config.batch_file_size,
            "tag_entries": tag_entries_on()}


def record(config: BuildConfig, segments: list[Segment], stops: list[dict]) -> dict | None:
    """The manifest's ``incremental`` record of a whole log's build (None for a log behind a URI: its bytes are
    not fingerprinted here, so a later build reads it in full)."""
    by_name = {s.name: s for s in segments}
    rows = []
    for st in stops:
        seg = by_name.get(st["segment"])
        if seg is None or storage.is_remote(seg.path):
            return None
        end = st["segment_offset"]
        head, tail = _fingerprint(open_segment(seg), end)
        rows.append({"name": seg.name, "base_offset": seg.base_offset, "size": seg.size, "read_end": end,
                     "kind": st["kind"], "head_crc": head, "tail_crc": tail})
    return {"settings": settings_of(config), "log": rows}
