"""Entries -> time windows, and IndexFile names.

In: store timestamps (ms) and a window length; files in (window, seq) order with their first entry's
store timestamp. Out: window ids and window starts; broker-style file names.
Stays true: ``window = floorDiv(store_timestamp_ms, window_ms)``, one window when ``window_ms == 0``;
names are the ``yyyyMMddHHmmssSSS`` rendering of a file's first entry time in the configured zone and
strictly increase in (window, seq) order, a name that would not being moved later by the fewest
milliseconds that make it sort after its predecessor (the broker sorts its index files by name).
"""
from __future__ import annotations

from datetime import datetime

import numpy as np

from rocketidx.errors import RocketIdxError


class FileNameError(RocketIdxError):
    """A store timestamp that cannot become a broker-style file name."""

    def __init__(self, ms: int, reason: str) -> None:
        super().__init__(ms, reason)
        self.ms, self.reason = ms, reason

    def __str__(self) -> str:
        return f"store timestamp {self.ms} of a file's first entry: {self.reason}"

def assign_windows(store_timestamp_ms: np.ndarray, window_ms: int) -> np.ndarray:
    """Window id of every timestamp: ``floorDiv(ts, window_ms)``, or 0 everywhere for one window."""
    ts = np.asarray(store_timestamp_ms, np.int64)
    if window_ms == 0:
        return np.zeros(len(ts), np.int64)
    return np.floor_divide(ts, window_ms)


def window_start_ms(window_id: int, window_ms: int) -> int:
    return window_id * window_ms


def staging_name(window_id: int, seq: int, window_ms: int) -> str:
    """The name a file has while staged: ``<window start, 15 digits>_<seq, 4 digits>`` (as golden/)."""
    start = window_id * window_ms
    return f"{start:015d}_{seq:04d}" if start >= 0 else f"-{-start:014d}_{seq:04d}"


def render_name(ms: int, tz) -> str:
    """``UtilAll.timeMillisToHumanString``: yyyyMMddHHmmssSSS in ``tz``."""
    # Whole seconds through the zone, millis appended: a float ms/1000 can round 0.123 to 0.122999.
    try:
        dt = datetime.fromtimestamp(ms // 1000, tz)
    except (ValueError, OverflowError, OSError) as e:
        raise FileNameError(ms, "outside the years 1 to 9999 that a yyyyMMddHHmmssSSS name can hold") from e
    if dt.year < 1000:
        raise FileNameError(ms, "before year 1000: the name would not have four year digits")
    return dt.strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


def _parse_name(name: str, tz) -> datetime:
    dt = datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(microsecond=int(name[14:17]) * 1000)
    return dt.replace(tzinfo=tz)


def assign_file_names(first_timestamps_ms: list[int], tz, after: str | None = None) -> list[str]:
    """Broker-style names for files in (window, seq) order, strictly increasing as strings.

    ``after``: a name every new one must sort after (the newest file kept in a broker's index).
    """
    names: list[str] = [after] if after else []
    prev_ms: int | None = None
    for ts in first_timestamps_ms:
        ms = ts if prev_ms is None else max(ts, prev_ms + 1)
        name = render_name(ms, tz)
        while names and name <= names[-1]:
            # Local time went back (DST): skip ahead by the wall-clock distance still missing.
            gap = _parse_name(names[-1], None) - _parse_name(name, None)
            ms += max(1, int(gap.total_seconds() * 1000) + 1)
            name = render_name(ms, tz)
        names.append(name)
        prev_ms = ms
    return names[1:] if after else names
