"""Sizing advice: which hashSlotNum and indexNum would give an index the chain length and file count asked for.

Formulas, for ``n`` entries per file holding ``d`` distinct key hashes over ``S`` slots, assuming hashes
spread uniformly over slots (the slot-occupancy statistics show whether they do): expected used slots
``U = S * (1 - (1 - 1/S)^d)``; mean chain length over used slots ``n / U``, never below ``n / d``
(repeated keys share a chain whatever ``S`` is); a window with ``w`` entries needs
``ceil(w / (index_num - 1))`` files, so files per day is that sum over the observed windows scaled to a
day (``w / (index_num - 1)`` per day for one unwindowed sequence, as a broker writes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rocketidx.errors import ConfigError
import rocketidx.layout as L


MS_PER_DAY = 86_400_000


def expected_used_slots(distinct_hashes, hash_slot_num):
    """``S * (1 - (1 - 1/S)^d)``: slots hit by ``d`` hashes spread uniformly over ``S`` slots."""
    d = np.asarray(distinct_hashes, np.float64)
    s = np.asarray(hash_slot_num, np.float64)
    return s * -np.expm1(d * np.log1p(-1.0 / s))  # expm1/log1p: exact where 1/S is tiny


@dataclass(frozen=True)
class SizingTargets:
    """What the advice aims for: mean chain length over used slots in the fullest file, files per day,
    and a headroom factor on the observed peak traffic."""

    mean_chain: float = 1.5
    files_per_day: float = 24.0
    headroom: float = 2.0

    def __post_init__(self) -> None:
        if not self.mean_chain >= 1.0:
            raise ConfigError("target_mean_chain", self.mean_chain, "must be >= 1 (a used slot holds at least one item)")
        if not self.files_per_day > 0:
            raise ConfigError("target_files_per_day", self.files_per_day, "must be positive")
        if not self.headroom >= 1.0:
            raise ConfigError("headroom", self.headroom, "must be >= 1")


def predicted_mean_chain(entries: float, distinct: float, hash_slot_num: int) -> float:
    if entries <= 0:
        return 0.0
    return float(entries / expected_used_slots(distinct, hash_slot_num))


def slots_for_mean_chain(entries: float, distinct: float, target: float) -> int | None:
    """Smallest slot count whose predicted mean chain is <= target; None when repeated keys alone
    (``entries / distinct``) exceed it. Bisection: the prediction falls as slots grow."""
    if entries <= 0:
        return 1
    if predicted_mean_chain(entries, distinct, 2**31 - 1) > target:
        return None
    lo, hi = 1, 2**31 - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if predicted_mean_chain(entries, distinct, mid) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def files_per_day(window_entries: np.ndarray, index_num: int, span_ms: float, windowed: bool) -> float:
    """Files a day for this traffic: whole files per window (windowed), or one continuous sequence."""
    w = np.asarray(window_entries, np.float64)
    cap = index_num - L.FIRST_INDEX
    files = np.ceil(w / cap).sum() if windowed else w.sum() / cap
    return float(files * MS_PER_DAY / span_ms)


def round_up_nice(x: float) -> int:
    """Up to two significant digits: 1,234,567 -> 1,300,000 (sizes people can read and type)."""
    if x <= 10:
        return int(math.ceil(x))
    e = 10 ** (int(math.floor(math.log10(x))) - 1)
    return int(math.ceil(x / e) * e)


def _index_num_for(window_entries: np.ndarray, span_ms: float, windowed: bool, target: float, max_index_num: int
                   ) -> int | None:
    """Smallest index_num giving at most ``target`` files a day, or None when no size can (windowed:
    there are more windows a day than that). Bisection: files per day fall as index_num grows."""
    ok = lambda i: files_per_day(window_entries, i, span_ms, windowed) <= target * (1 + 1e-9)  # noqa: E731
    lo, hi = L.FIRST_INDEX + 1, max_index_num
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def sizing_advice(window_entries, span_ms: float, windowed: bool, entries_per_hash: float,
                  current: tuple[int, int], targets: SizingTargets = SizingTargets(),
                  observed: dict | None = None) -> list[dict]:
    """Rows for the sizing table: as built, advised for the targets, and the broker's defaults.

    ``window_entries``: entries of each observed window (one value for a single sequence);
    ``span_ms``: the time those entries cover (whole windows for a windowed build); ``entries_per_hash``:
    entries / distinct key hashes per file, observed (repeated keys do not spread over slots);
    ``observed``: measured values for the as-built row (``mean_chain``, ``files_per_day``).
    """
    from rocketidx.config import MAX_INDEX_FILE_BYTES
    w = np.asarray(window_entries, np.float64)
    span_ms = max(float(span_ms), 60_000.0)  # under a minute of data says nothing per day
    r = max(1.0, float(entries_per_hash))
    peak = float(w.max()) if len(w) else 0.0
    grown = w * targets.headroom
    notes: list[str] = []

    def row(scenario: str, S: int, I: int, traffic: np.ndarray, note: str = "") -> dict:
        n_file = min(I - L.FIRST_INDEX, float(traffic.max()) if len(traffic) else 0.0)
        size = L.index_file_size(S, I)
        out = {"scenario": scenario, "hash_slot_num": S, "index_num": I, "file_bytes": size,
               "entries_per_file": int(round(n_file)),
               "predicted_used_slots": int(round(float(expected_used_slots(n_file / r, S)))),
               "predicted_mean_chain": round(predicted_mean_chain(n_file, n_file / r, S), 3),
               "predicted_load_factor": round(n_file / S, 3),
               "predicted_files_per_day": round(files_per_day(traffic, I, span_ms, windowed), 2),
               "observed_mean_chain": None, "observed_files_per_day": None,
               "target_mean_chain": targets.mean_chain, "target_files_per_day": targets.files_per_day,
               "fits_2gib": size <= MAX_INDEX_FILE_BYTES, "note": note}
        return out

    max_i = (MAX_INDEX_FILE_BYTES - L.index_file_size(1, 0)) // L.INDEX_ITEM.itemsize
    raw_i = _index_num_for(grown, span_ms, windowed, targets.files_per_day, max_i)
    if raw_i is None:
        raw_i = min(max_i, int(math.ceil(peak * targets.headroom)) + L.FIRST_INDEX)
        notes.append(f"more windows a day than {targets.files_per_day:g} files: sized for one file per window")
    index_num = min(max(round_up_nice(raw_i), L.FIRST_INDEX + 1), max_i)
    n_file = min(index_num - L.FIRST_INDEX, peak * targets.headroom)
    target = targets.mean_chain
    slots = slots_for_mean_chain(n_file, n_file / r, target)
    if slots is None:
        target = r * 1.25
        notes.append(f"repeated keys alone give chains of {r:.2f}; aimed at {target:.2f}")
        slots = slots_for_mean_chain(n_file, n_file / r, target) or 1
    slots = round_up_nice(slots)
    max_slots = (MAX_INDEX_FILE_BYTES - L.index_file_size(0, index_num)) // L.SLOT.itemsize
    if slots > max_slots:
        slots = max_slots
        notes.append("slots capped so that the file stays under 2 GiB")
    built = row("as built", *current, w)
    if observed:
        built.update({f"observed_{k}": v for k, v in observed.items()})
    return [built,
            row("advised", slots, index_num, grown, "; ".join(notes)),
            row("broker default", L.DEFAULT_HASH_SLOT_NUM, L.DEFAULT_INDEX_NUM, grown)]
