"""Build settings: one frozen, validated object, passed explicitly.

Defaults follow the broker's ``MessageStoreConfig`` (5,000,000 hash slots, 20,000,000 items, 64 results
per query) and the project's choice of one-hour windows.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from rocketidx.errors import ConfigError
import rocketidx.layout as L
from rocketidx.units import parse_duration_ms, resolve_timezone

DEFAULT_WINDOW_MS = 3_600_000
DEFAULT_BATCH_RECORDS = 65_536
MAX_INDEX_FILE_BYTES = 2**31 - 1  # a MappedByteBuffer, as the broker maps an IndexFile, is int-indexed
TARGETS = ("index", "consumequeue")  # what a build can write, in the order the manifest lists them
SIZE_FIELDS = "hash_slot_num, index_num"  # the option an IndexFile too large to map is blamed on


@dataclass(frozen=True)
class BuildConfig:
    hash_slot_num: int = L.DEFAULT_HASH_SLOT_NUM
    index_num: int = L.DEFAULT_INDEX_NUM
    window_ms: int = DEFAULT_WINDOW_MS
    timezone: str = "local"
    check_crc: bool = True
    batch_records: int = DEFAULT_BATCH_RECORDS
    targets: tuple[str, ...] = ("index",)  # what a build writes: index, consumequeue, or both
    cq_file_size: int = L.DEFAULT_CQ_FILE_SIZE  # mappedFileSizeConsumeQueue as configured (rounded up to 20)
    delay_levels: str = L.DEFAULT_DELAY_LEVELS  # messageDelayLevel: delayed messages' tagsCode

    def __post_init__(self) -> None:
        if not isinstance(self.hash_slot_num, int) or self.hash_slot_num < 1:
            raise ConfigError("hash_slot_num", self.hash_slot_num, "must be a positive integer")
        if not isinstance(self.index_num, int) or self.index_num < 2:
            raise ConfigError("index_num", self.index_num, "must be an integer >= 2 (item 0 is never used)")
        size = L.index_file_size(self.hash_slot_num, self.index_num)
        if size > MAX_INDEX_FILE_BYTES:  # both sizes make it: the error names the two (SIZE_FIELDS)
            raise ConfigError(SIZE_FIELDS, (self.hash_slot_num, self.index_num),
                              f"an IndexFile of 40 + 4*{self.hash_slot_num} + 20*{self.index_num} = {size:,} bytes is "
                              f"over the {MAX_INDEX_FILE_BYTES:,} a broker can map (its MappedByteBuffer is "
                              "int-indexed): lower either")
        if not isinstance(self.window_ms, int) or self.window_ms < 0:
            raise ConfigError("window_ms", self.window_ms, "must be >= 0 (0 = one window)")
        if self.batch_records < 1:
            raise ConfigError("batch_records", self.batch_records, "must be positive")
        resolve_timezone(self.timezone)
        if isinstance(self.targets, str):
            object.__setattr__(self, "targets", tuple(t.strip() for t in self.targets.split(",") if t.strip()))
        if not self.targets or set(self.targets) - set(TARGETS) or len(set(self.targets)) != len(self.targets):
            raise ConfigError("targets", ",".join(self.targets), f"one or both of {', '.join(TARGETS)}, each once")
        object.__setattr__(self, "targets", tuple(t for t in TARGETS if t in self.targets))
        if not isinstance(self.cq_file_size, int) or self.cq_file_size < 1:
            raise ConfigError("cq_file_size", self.cq_file_size, "must be a positive number of bytes (a queue file "
                                                                 "holds 20-byte entries; 19 is rounded up to 20)")

    @property
    def index(self) -> bool:
        return "index" in self.targets

    @property
    def consumequeue(self) -> bool:
        return "consumequeue" in self.targets

    @property
    def queue_file_size(self) -> int:
        """The queue files' size as the broker uses it: ``cq_file_size`` rounded up to a multiple of 20."""
        return L.cq_file_size(self.cq_file_size)

    @property
    def tzinfo(self):
        return resolve_timezone(self.timezone)[1]

    def as_dict(self) -> dict:
        return asdict(self)

    def with_overrides(self, **kw) -> "BuildConfig":
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


def load_config(path: str | Path | None, **overrides) -> BuildConfig:
    """Settings from a JSON file (``conf/defaults.json`` layout, section ``index``), then overrides (None:
    not given). The result is checked once, as a whole: a file's size that a flag overrides is not checked
    on its own."""
    settings = {**conf_settings(path), **{k: v for k, v in overrides.items() if v is not None}}
    return replace(BuildConfig(), **settings)


def conf_settings(path: str | Path | None) -> dict:
    """The :class:`BuildConfig` fields a JSON settings file sets ({} without one), ``window`` as ``window_ms``."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError("conf", str(path), f"cannot read: {e}") from e
    section = dict(data.get("index", data))
    unknown = set(section) - {f.name for f in fields(BuildConfig)} - {"window"}
    if unknown:
        raise ConfigError("conf", str(path), f"unknown settings {sorted(unknown)}")
    if "window" in section:
        section["window_ms"] = parse_duration_ms(section.pop("window"), "window")
    return section


CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def project_conf(name: str) -> str | None:
    """The project's ``conf/<name>`` when running from a checkout (the default settings files), else None:
    an installed package or a ``--py-files`` zip has no ``conf/`` and runs on built-in defaults."""
    p = CONF_DIR / name
    return str(p) if p.is_file() else None


# --- the broker's own settings: the properties file it was started with (``mqbroker -c FILE``) -------------
# rocketidx uses four of its keys (messageDelayLevel: delayed messages' tagsCode; mappedFileSizeConsumeQueue,
# maxHashSlotNum, maxIndexNum: the files' sizes), checked as the broker checks them; explicit flags win over
# the file, the file over the defaults; every other key is the broker's business.

BROKER_KEYS = ("messageDelayLevel", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum")
# What a restart re-dispatches depends on these too (``verify --store``, rocketidx.verify.restart). The broker
# reads a boolean with Boolean.parseBoolean (``true`` in any case is true, anything else false) and
# flushDiskType with FlushDiskType.valueOf.
BROKER_SWITCHES = ("messageIndexEnable", "messageIndexSafe")
FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
_DELAY_WORD = re.compile(r"^[0-9]+[smhd]$")


def read_properties(path: str | Path) -> dict[str, str]:
    """``java.util.Properties.load`` for the files brokers are started with: ``key=value``, ``key: value`` or
    ``key value``, ``#``/``!`` comments, blank lines, a trailing backslash continuing a line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("--broker-conf", str(path), f"cannot read: {e}") from e
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        m = re.match(r"^((?:\\.|[^=:\s])*)\s*[=:\s]?\s*(.*)$", logical)
        if m and m.group(1):
            out[m.group(1).replace("\\", "")] = m.group(2).rstrip("\r")
        logical = ""
    return out


def broker_settings(path: str | Path) -> dict[str, object]:
    """The keys of :data:`BROKER_KEYS` the file sets, parsed and checked (a value the broker would reject: an error)."""
    props = read_properties(path)
    got: dict[str, object] = {k: props[k].strip().lower() == "true" for k in BROKER_SWITCHES if k in props}
    if "flushDiskType" in props:
        got["flushDiskType"] = props["flushDiskType"].strip()
        if got["flushDiskType"] not in FLUSH_DISK_TYPES:
            raise ConfigError(f"{path}: flushDiskType", got["flushDiskType"], "the broker takes ASYNC_FLUSH or SYNC_FLUSH")
    for key in BROKER_KEYS:
        if key not in props:
            continue
        value = props[key].strip()
        where = f"{path}: {key}"
        if key == "messageDelayLevel":
            words = value.split(" ")
            if not value or not all(_DELAY_WORD.match(w) for w in words):
                raise ConfigError(where, value, "the broker parses each level as a number and one of s, m, h, d, "
                                                "separated by single spaces (ScheduleMessageService.parseDelayLevel)")
            got[key] = value
        else:
            try:
                number = int(value)
            except ValueError:
                raise ConfigError(where, value, "not an integer: the broker would not start") from None
            if number < 1 or number > 2**31 - 1:
                raise ConfigError(where, value, "must be a positive int, as the broker's setter takes it")
            got[key] = number
    return got


_RELEASE = re.compile(r"^(\d+)(?:\.(\d+|x))?(?:\.(\d+|x))?$")


@dataclass(frozen=True)
class BrokerRelease:
    """``--broker-version``: the RocketMQ release that wrote a store, for the rules that differ by release.

    No broker.conf key names a version, and a 5.3 store cannot always be told from a 5.5 one, so it is
    the user's to give; without it the rules are 8fc57f1's (the 5.x line up to 5.3), said on stderr.
    """

    given: str | None
    line: str  # the restart model's release line: 5.x (8fc57f1), 5.5.x or 4.9.x (rocketidx.verify.restart)
    tag_entries: bool  # 5.4.0 on: IndexService.buildIndex adds topic#T#TAGS per tagged message

    @property
    def rules(self) -> str:
        if self.tag_entries:
            return f"RocketMQ {self.given} (5.4.0 on: an index entry topic#T#TAGS per tagged message)"
        if self.line == "4.9.x":
            return f"RocketMQ {self.given} (the 4.9 line)"
        if self.given is None:
            return "RocketMQ 8fc57f1 (5.0 to 5.3; no --broker-version: a 5.4+ broker also indexes tags)"
        return f"RocketMQ {self.given} (8fc57f1's, 5.0 to 5.3)"


def broker_release(text: str | None) -> BrokerRelease:
    """``4.9.8``, ``5.3.3``, ``5.5``, ``5.x`` ... -> :class:`BrokerRelease`; anything else is a ConfigError."""
    if text is None:
        return BrokerRelease(None, "5.x", False)
    t = text.strip().lower().removeprefix("rocketmq-all-").removeprefix("v")
    m = _RELEASE.match(t)
    if m and m.group(1) == "4":
        return BrokerRelease(text.strip(), "4.9.x", False)
    if m and m.group(1) == "5":
        minor = int(m.group(2)) if m.group(2) not in (None, "x") else None
        return BrokerRelease(text.strip(), "5.5.x" if minor is not None and minor >= 5 else "5.x",
                             minor is not None and minor >= 4)
    raise ConfigError("--broker-version", text, "a RocketMQ release: 4.9.x or 5.x (e.g. 4.9.8, 5.3.3, 5.5.0)")
