"""Sizes, counts, durations and times as people write them: one parser each, for every way in.

In: a string (a CLI flag, a ``conf/`` JSON value, a Spark data source option, a job argument) or an int.
Out: a plain int, or a :class:`rocketidx.errors.ConfigError` naming the option, the value and what was
expected. Stays true: the same spelling means the same value wherever it is written; the argparse
adapters (:func:`arg`) turn the same errors into argparse's one-line usage errors.

* size: ``134217728``, ``128m``, ``64KiB``, ``1g``, ``1.5GB`` (binary units: k = 1024), > 0;
* count: a whole number (``20_000_000`` allowed), at least ``minimum`` (default 0);
* duration: ``1h``, ``15m``, ``90s``, ``250ms``, ``2d``, or a bare number of milliseconds; ``0`` allowed;
* time: epoch milliseconds, or an ISO-8601 date-time (a time without a zone is taken as UTC);
* flag: true/false, 1/0, yes/no, on/off.
"""
from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta, timezone
from typing import Callable, Mapping
from zoneinfo import ZoneInfo

from rocketidx.errors import ConfigError
from rocketidx.layout import DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM

# Every reader takes each size from the flag, else the manifest, else the files (output.open.open_index_dir).
HASH_SLOTS_HELP = ("hashSlotNum of the files (default: the manifest, else what the files tell, else the broker's "
                   f"{DEFAULT_HASH_SLOT_NUM})")
INDEX_NUM_HELP = ("indexNum of the files (default: the manifest, else what the files tell, else the broker's "
                  f"{DEFAULT_INDEX_NUM})")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(-?\d+)\s*(ms|s|m|h|d)?\s*$")  # a sign, so that -1h is "must not be negative"
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_size(text: str | int, option: str = "size") -> int:
    """A positive number of bytes: ``134217728``, ``128m``, ``64KiB``, ``1g``, ``1.5g``."""
    if _is_int(text):
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise ConfigError(option, text, "expected a byte size like 134217728, 128m, 64KiB or 1g")
        scaled = float(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower())
        if scaled != int(scaled):
            raise ConfigError(option, text, "is not a whole number of bytes")
        value = int(scaled)
    if value <= 0:
        raise ConfigError(option, text, "must be positive")
    return value


def parse_count(text: str | int, option: str = "count", *, minimum: int = 0) -> int:
    """A whole number at least ``minimum``; underscores group digits (``20_000_000``)."""
    if _is_int(text):
        value = text
    else:
        try:
            value = int(str(text).strip().replace("_", ""))
        except ValueError:
            raise ConfigError(option, text, "expected a whole number") from None
    if value < minimum:
        # 1 is the usual floor (slots, items, partitions): the words BuildConfig uses for it too.
        raise ConfigError(option, text, "must be a positive integer" if minimum == 1 else f"must be at least {minimum}")
    return value


def parse_duration_ms(text: str | int, option: str = "duration", *, minimum: int = 0) -> int:
    """``1h``, ``15m``, ``90s``, ``250ms``, ``2d`` or a bare number of ms, at least ``minimum`` ms; a window
    of ``0`` means one window."""
    if _is_int(text):
        value = text
    else:
        m = _DURATION.match(str(text))
        if not m:
            raise ConfigError(option, text, "expected a duration like 1h, 15m, 90s, 250ms or 0")
        value = int(m.group(1)) * _UNIT_MS[m.group(2)]
    if value < minimum:
        raise ConfigError(option, text, "must not be negative" if minimum == 0 else f"must be at least {minimum} ms")
    return value


def parse_time_ms(text: str | int, option: str = "time") -> int:
    """Epoch milliseconds, or an ISO-8601 date-time (a time without a zone is taken as UTC)."""
    if _is_int(text):
        return text
    s = str(text).strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(option, text, "expected epoch milliseconds or an ISO-8601 date-time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    # Integer arithmetic: a float timestamp turns .123 s into 122.9999 ms.
    return (dt - _EPOCH) // timedelta(milliseconds=1)


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def parse_bool(text: str | bool, option: str = "flag") -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off, any case)."""
    if isinstance(text, bool):
        return text
    s = str(text).strip().lower()
    if s not in _TRUE | _FALSE:
        raise ConfigError(option, text, "expected true or false")
    return s in _TRUE


def optional(parse: Callable[..., int], options: Mapping[str, object], name: str, **kwargs) -> int | None:
    """``parse(options[name], name)``, or None when the option is absent or blank (string options of a
    data source, JSON settings)."""
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return None
    return parse(raw, name, **kwargs)


def arg(parse: Callable[..., int], option: str, **kwargs) -> Callable[[str], int]:
    """An argparse ``type=`` for one of the parsers above: its ConfigError becomes a usage error, the value
    and the reason (argparse names the option: ``argument --window: 'abc': expected a duration ...``)."""
    def convert(text: str) -> int:
        try:
            return parse(text, option, **kwargs)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(f"{e.value!r}: {e.reason}") from e
    convert.__name__ = option  # argparse names the type in some messages
    return convert


def size_arg(option: str) -> Callable[[str], int]:
    return arg(parse_size, option)


def count_arg(option: str, minimum: int = 0) -> Callable[[str], int]:
    return arg(parse_count, option, minimum=minimum)


def duration_arg(option: str, minimum: int = 0) -> Callable[[str], int]:
    return arg(parse_duration_ms, option, minimum=minimum)


def time_arg(option: str) -> Callable[[str], int]:
    return arg(parse_time_ms, option)


def format_duration(ms: int) -> str:
    """Milliseconds as :func:`parse_duration_ms` reads them, in the largest whole unit: 1h, 10m, 90s, 250ms."""
    if not ms:
        return "0"
    unit, size = next((u, n) for u, n in sorted(_UNIT_MS.items(), key=lambda x: -x[1]) if u and int(ms) % n == 0)
    return f"{int(ms) // size}{unit}"


def format_utc(ms: int, iso: bool = False) -> str:
    """Epoch milliseconds as a UTC date-time (``iso``: ISO-8601 with milliseconds), or the bare number
    when no calendar date holds it: store times come from bytes that may be damaged, and printing them
    must not fail."""
    try:
        dt = datetime.fromtimestamp(int(ms) / 1000, timezone.utc)
    except (ValueError, OverflowError, OSError):
        return f"{int(ms)} ms (not a date)"
    return dt.isoformat(timespec="milliseconds") if iso else dt.strftime("%Y-%m-%d %H:%M:%S")


def resolve_timezone(name: str | None) -> tuple[str, object]:
    """(name, tzinfo): ``None``/``local`` is this host's zone, as the broker uses its host's zone."""
    if name in (None, "", "local"):
        local = datetime.now().astimezone().tzinfo
        return "local", local
    if name.upper() == "UTC":
        return "UTC", timezone.utc
    try:
        return name, ZoneInfo(name)
    except Exception as e:  # ZoneInfoNotFoundError, ValueError on odd keys
        raise ConfigError("timezone", name, "unknown time zone") from e


def human_bytes(n: int) -> str:
    """A size in binary units with one decimal (``8.5 GiB``), as the engine's reasons and progress say it."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
