"""Build settings: one frozen, validated object, passed explicitly.

Defaults follow the broker's ``MessageStoreConfig`` (5,000,000 hash slots, 20,000,000 items, 64 results
per query) and the project's choice of one-hour windows.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from rocketidx.errors import ConfigError
import rocketidx.layout as L
from rocketidx.units import parse_duration_ms, resolve_timezone

DEFAULT_WINDOW_MS = 3_600_000
DEFAULT_BATCH_RECORDS = 65_536
MAX_INDEX_FILE_BYTES = 2**31 - 1  # a MappedByteBuffer, as the broker maps an IndexFile, is int-indexed


@dataclass(frozen=True)
class BuildConfig:
    hash_slot_num: int = L.DEFAULT_HASH_SLOT_NUM
    index_num: int = L.DEFAULT_INDEX_NUM
    window_ms: int = DEFAULT_WINDOW_MS
    timezone: str = "local"
    check_crc: bool = True
    batch_records: int = DEFAULT_BATCH_RECORDS

    def __post_init__(self) -> None:
        if not isinstance(self.hash_slot_num, int) or self.hash_slot_num < 1:
            raise ConfigError("hash_slot_num", self.hash_slot_num, "must be a positive integer")
        if not isinstance(self.index_num, int) or self.index_num < 2:
            raise ConfigError("index_num", self.index_num, "must be an integer >= 2 (item 0 is never used)")
        if L.index_file_size(self.hash_slot_num, self.index_num) > MAX_INDEX_FILE_BYTES:
            raise ConfigError("index_num", self.index_num,
                              "40 + 4*hash_slot_num + 20*index_num exceeds 2 GiB; the broker cannot map it")
        if not isinstance(self.window_ms, int) or self.window_ms < 0:
            raise ConfigError("window_ms", self.window_ms, "must be >= 0 (0 = one window)")
        if self.batch_records < 1:
            raise ConfigError("batch_records", self.batch_records, "must be positive")
        resolve_timezone(self.timezone)

    @property
    def tzinfo(self):
        return resolve_timezone(self.timezone)[1]

    def as_dict(self) -> dict:
        return asdict(self)

    def with_overrides(self, **kw) -> "BuildConfig":
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


def load_config(path: str | Path | None, **overrides) -> BuildConfig:
    """Settings from a JSON file (``conf/defaults.json`` layout, section ``index``), then overrides."""
    base = BuildConfig()
    if path is not None:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ConfigError("conf", str(path), f"cannot read: {e}") from e
        section = data.get("index", data)
        known = {f.name for f in fields(BuildConfig)}
        unknown = set(section) - known - {"window"}
        if unknown:
            raise ConfigError("conf", str(path), f"unknown settings {sorted(unknown)}")
        if "window" in section:
            section = dict(section, window_ms=parse_duration_ms(section.pop("window"), "window"))
        base = replace(base, **section)
    return base.with_overrides(**overrides)


CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def project_conf(name: str) -> str | None:
    """The project's ``conf/<name>`` when running from a checkout (the default settings files), else None:
    an installed package or a ``--py-files`` zip has no ``conf/`` and runs on built-in defaults."""
    p = CONF_DIR / name
    return str(p) if p.is_file() else None
