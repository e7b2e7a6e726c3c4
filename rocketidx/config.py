"""Settings, resolved once: every command's flags, the broker's properties file, ``conf/`` and the defaults.

In: what a command or job was given (flags, ``--broker-conf``, ``--conf``, ``--spark-conf``). Out: frozen,
validated objects, passed explicitly: :class:`BuildConfig` (the files' sizes, window, targets),
:class:`SparkSettings`, the time index's directory, and each operation's request (:class:`BuildRequest` ...),
which holds all of them. Stays true: the order flag > broker.conf > conf > default is written here and
nowhere else, as are where ``conf/`` is and what the time index's ``auto`` means.

Defaults follow the broker's ``MessageStoreConfig`` (5,000,000 hash slots, 20,000,000 items, 64 results
per query) and the project's choice of one-hour windows.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Mapping

from rocketidx.errors import ConfigError
import rocketidx.layout as L
import rocketidx.storage as storage
from rocketidx.units import parse_duration_ms, parse_size, resolve_timezone

DEFAULT_WINDOW_MS = 3_600_000
DEFAULT_BATCH_RECORDS = 65_536
MAX_INDEX_FILE_BYTES = 2**31 - 1  # a MappedByteBuffer, as the broker maps an IndexFile, is int-indexed
TARGETS = ("index", "consumequeue")  # what a build can write, in the order the manifest lists them
SIZE_FIELDS = "hash_slot_num, index_num"  # the option an IndexFile too large to map is blamed on


# Which records' light-queue names a release's dispatch leaves out, by the record's topic (the broker's
# checkMultiDispatchQueue; read in each release's rocketmq-store sources):
LMQ_TOPIC_RULES = {
    "none": "every topic (4.9.x, 5.0.x, 5.1.0)",
    "5.1.1": "%RETRY% topics (5.1.1)",
    "5.1.3": "%RETRY% topics, rmq_sys_wheel_timer and SCHEDULE_TOPIC_XXXX (5.1.3, 5.1.4; 5.1.2 is not served)",
    "5.2": "%RETRY% topics, rmq_sys_* and SCHEDULE_TOPIC_XXXX (5.2.0 on)",
    # The RocksDB consume queue's own rule (RocksDBConsumeQueueStore.dispatchLMQ, MixAll.topicAllowsLMQ): with
    # enableLmq alone, whatever enableMultiDispatch says.
    "rocksdb": "%RETRY% and %DLQ% topics, rmq_sys_* and SCHEDULE_TOPIC_XXXX (a RocksDB consume queue, 5.2.0 on)",
}


@dataclass(frozen=True)
class LightQueues:
    """The light queues a broker's dispatch writes (``enableMultiDispatch=true`` in its broker.conf): the
    units of a message's ``INNER_MULTI_DISPATCH`` names. ``enable_lmq``: ``enableLmq`` (a ``%LMQ%`` name's
    queue id is 0, else the record's); ``topics``: the release's rule for which records' names are
    dispatched (a key of :data:`LMQ_TOPIC_RULES`)."""

    enable_lmq: bool = False
    topics: str = "5.2"

    def __post_init__(self) -> None:
        if self.topics not in LMQ_TOPIC_RULES:
            raise ConfigError("light queue rules", self.topics, f"one of {', '.join(LMQ_TOPIC_RULES)}")

    def dispatches(self, topic: str) -> bool:
        """Whether a record of ``topic`` has its light-queue units written, under this release's rule."""
        if self.topics == "none":
            return True
        if self.topics == "rocksdb":
            return not (topic.startswith((L.RETRY_TOPIC_PREFIX, L.DLQ_TOPIC_PREFIX, L.SYSTEM_TOPIC_PREFIX))
                        or topic == L.SCHEDULE_TOPIC)
        if topic.startswith(L.RETRY_TOPIC_PREFIX):
            return False
        if self.topics == "5.1.1":
            return True
        if topic == L.SCHEDULE_TOPIC:
            return False
        return topic != L.TIMER_TOPIC if self.topics == "5.1.3" else not topic.startswith(L.SYSTEM_TOPIC_PREFIX)


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
    light_queues: LightQueues | None = None  # with enableMultiDispatch: the light queues' rules (else None)
    # queue.type=BatchCQ topics (the broker's config/topics.json): their records go to batch consume queues
    batch_topics: tuple[str, ...] = ()
    batch_file_size: int = L.DEFAULT_BATCH_CQ_FILE_SIZE  # mapperFileSizeBatchConsumeQueue

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
        object.__setattr__(self, "batch_topics", tuple(sorted(set(self.batch_topics))))
        if not isinstance(self.batch_file_size, int) or self.batch_file_size < L.BATCH_CQ_UNIT_SIZE:
            raise ConfigError("batch_file_size", self.batch_file_size, "must hold at least one 46-byte unit")
        if not isinstance(self.cq_file_size, int) or self.cq_file_size < 1:
            raise ConfigError("cq_file_size", self.cq_file_size, "must be a positive number of bytes (a queue file "
                                                                 "holds 20-byte entries; 19 is rounded up to 20)")

    @property
    def index(self) -> bool:
        return "index" in self.targets

    @property
    def batch_queues(self) -> bool:
        """Whether the build writes batch consume queues (the consumequeue target and BatchCQ topics)."""
        return "consumequeue" in self.targets and bool(self.batch_topics)

    def refuse_batch_queues(self, plan: str) -> None:
        """A plan that cannot write batch consume queues yet refuses a build that would (rather than put the
        BatchCQ topics' records in ConsumeQueues, which the broker would refuse to load)."""
        if self.batch_queues:
            raise ConfigError("--topic-config", ", ".join(self.batch_topics),
                              f"batch consume queues are built in process over the whole log into a local output "
                              f"for now, not {plan}")

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


def project_conf(name: str, *, beside: str | os.PathLike | None = None) -> str | None:
    """The project's ``conf/<name>`` when running from a checkout (the default settings files), else None:
    an installed package or a ``--py-files`` zip has no ``conf/`` and runs on built-in defaults.
    ``beside``: a file of the checkout (a spark-submit job's own), whose ``conf/`` is the one beside its
    folder, wherever the package was imported from."""
    p = (CONF_DIR if beside is None else Path(beside).resolve().parents[1] / "conf") / name
    return str(p) if p.is_file() else None


# --- the broker's own settings: the properties file it was started with (``mqbroker -c FILE``) -------------
# rocketidx uses four of its keys (messageDelayLevel: delayed messages' tagsCode; mappedFileSizeConsumeQueue,
# maxHashSlotNum, maxIndexNum: the files' sizes), checked as the broker checks them; explicit flags win over
# the file, the file over the defaults; every other key is the broker's business.

BROKER_KEYS = ("messageDelayLevel", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum",
               "mapperFileSizeBatchConsumeQueue")
# What a restart re-dispatches depends on these too (``verify --store``, rocketidx.verify.restart). The broker
# reads a boolean with Boolean.parseBoolean (``true`` in any case is true, anything else false) and
# flushDiskType with FlushDiskType.valueOf.
BROKER_SWITCHES = ("messageIndexEnable", "messageIndexSafe", "enableLmq", "enableMultiDispatch",
                   "rocksdbCQDoubleWriteEnable", "combineCQUseRocksdbForLmq")
FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
# Where and how the queues are kept: storeType (``default``, ``defaultRocksDB``: a RocksDB consume queue) and
# that database's compression (RocksJava library names: lz4, zstd, snappy, ...; the broker's defaults below).
BROKER_STRINGS = ("storeType", "rocksdbCompressionType", "bottomMostCompressionTypeForConsumeQueueStore",
                  "useSeparateStorePathForRocksdbCQ")
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
    got.update({k: props[k].strip() for k in BROKER_STRINGS if k in props})
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
    lmq_topics: str = "5.2"  # which records' light-queue names are dispatched (LMQ_TOPIC_RULES)
    # ... into a RocksDB consume queue (dispatchLMQ): none before 5.3.2, "5.2" to 5.4.x, "rocksdb" from 5.5.0
    rocksdb_lmq: str | None = "5.2"

    @property
    def rules(self) -> str:
        if self.tag_entries:
            return f"RocketMQ {self.given} (5.4.0 on: an index entry topic#T#TAGS per tagged message)"
        if self.line == "4.9.x":
            return f"RocketMQ {self.given} (the 4.9 line)"
        if self.given is None:
            return "RocketMQ 8fc57f1 (5.0 to 5.3; no --broker-version: a 5.4+ broker also indexes tags)"
        return f"RocketMQ {self.given} (8fc57f1's, 5.0 to 5.3)"


def queue_store(broker: Mapping[str, object]) -> str:
    """``rocksdb`` where the broker keeps its queues in a RocksDB database (``storeType=defaultRocksDB``, 5.2.0
    on), else ``files``. A separate database path (``useSeparateStorePathForRocksdbCQ``) is refused, named."""
    if broker.get("storeType") != "defaultRocksDB":
        return "files"
    if str(broker.get("useSeparateStorePathForRocksdbCQ", "")).lower() == "true":
        raise ConfigError("useSeparateStorePathForRocksdbCQ", "true", "rocketidx repairs the RocksDB consume queue at "
                                                                      "STORE/consumequeue/ only, the default path")
    return "rocksdb"


def rocksdb_light_queues(broker: Mapping[str, object], release: BrokerRelease) -> LightQueues | None:
    """The light queues a RocksDB consume queue holds: with ``enableLmq`` (``enableMultiDispatch`` does not
    matter) every record's ``INNER_MULTI_DISPATCH`` names, under the release's own topic rule
    (``release.rocksdb_lmq``: 5.3.2 on), else none."""
    if broker.get("enableLmq") is not True or release.rocksdb_lmq is None:
        return None
    return LightQueues(True, release.rocksdb_lmq)


def rocksdb_compression(broker: Mapping[str, object]) -> tuple[str, str]:
    """The RocksDB consume queue's compression and its bottommost level's (the broker's defaults: lz4, zstd)."""
    return (str(broker.get("rocksdbCompressionType", "lz4")),
            str(broker.get("bottomMostCompressionTypeForConsumeQueueStore", "zstd")))


def broker_release(text: str | None) -> BrokerRelease:
    """``4.9.8``, ``5.3.3``, ``5.5``, ``5.x`` ... -> :class:`BrokerRelease`; anything else is a ConfigError."""
    if text is None:
        return BrokerRelease(None, "5.x", False)
    t = text.strip().lower().removeprefix("rocketmq-all-").removeprefix("v")
    m = _RELEASE.match(t)
    if m and m.group(1) == "4":
        return BrokerRelease(text.strip(), "4.9.x", False, "none")
    if m and m.group(1) == "5":
        minor = int(m.group(2)) if m.group(2) not in (None, "x") else None
        patch = int(m.group(3)) if m.group(3) not in (None, "x") else None
        return BrokerRelease(text.strip(), "5.5.x" if minor is not None and minor >= 5 else "5.x",
                             minor is not None and minor >= 4, _lmq_topics(minor, patch), _rocksdb_lmq(minor, patch))
    raise ConfigError("--broker-version", text, "a RocketMQ release: 4.9.x or 5.x (e.g. 4.9.8, 5.3.3, 5.5.0)")


def _lmq_topics(minor: int | None, patch: int | None) -> str:
    """The light-queue topic rule of release 5.minor.patch (None: not given, the newest of that line)."""
    if minor is None or minor >= 2:
        return "5.2"
    if minor == 0:
        return "none"
    return "none" if patch == 0 else "5.1.1" if patch == 1 else "5.1.3"


def _rocksdb_lmq(minor: int | None, patch: int | None) -> str | None:
    """The RocksDB consume queue's light-queue rule of release 5.minor.patch: none before 5.3.2 (no
    dispatchLMQ), ``5.2`` (MixAll.topicAllowsLMQ without %DLQ%) to 5.4.x, ``rocksdb`` from 5.5.0 (None given:
    the 5.x line's, 5.3.2 to 5.4)."""
    if minor is None or (minor == 3 and (patch is None or patch >= 2)) or minor == 4:
        return "5.2"
    return "rocksdb" if minor >= 5 else None


def batch_topics_of(path: str | os.PathLike) -> tuple[str, ...]:
    """Topics whose attribute ``queue.type`` is ``BatchCQ`` in a broker's topic table (``config/topics.json``):
    the broker keeps their queues in ``batchconsumequeue/`` and refuses to load a ``consumequeue/`` directory of
    one ("should be SimpleCQ, but is BatchCQ", ConsumeQueueStore.java). A file that is not JSON with a
    ``topicConfigTable`` is an error naming it."""
    from rocketidx.errors import StoreLayoutError
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8")).get("topicConfigTable") or {}
        items = table.items()
    except (ValueError, UnicodeDecodeError, AttributeError) as e:
        raise StoreLayoutError(str(path), f"not the broker's topic table (JSON with topicConfigTable): {e}") from e
    except OSError as e:
        raise StoreLayoutError(str(path), f"cannot read the broker's topic table: {e}") from e
    out = set()
    for name, conf in items:
        attrs = (conf or {}).get("attributes") or {} if isinstance(conf, dict) else {}
        kind = attrs.get("queue.type", attrs.get("+queue.type"))
        if isinstance(kind, str) and kind.lower() == L.BATCH_CQ.lower():
            out.add(conf.get("topicName", name))
    return tuple(sorted(out))


def light_queues(broker: Mapping[str, object], release: BrokerRelease) -> LightQueues | None:
    """The light queues a broker started with ``broker`` (its broker.conf settings) writes to files: None
    without ``enableMultiDispatch``, or where a 5.5 broker keeps them in RocksDB only
    (``rocksdbCQDoubleWriteEnable`` and ``combineCQUseRocksdbForLmq``, MultiDispatchUtils)."""
    if not broker.get("enableMultiDispatch"):
        return None
    if broker.get("rocksdbCQDoubleWriteEnable") and broker.get("combineCQUseRocksdbForLmq"):
        return None
    return LightQueues(bool(broker.get("enableLmq")), release.lmq_topics)


# --- where conf/ is, and what a settings file the user did not name falls back to ---------------------------

def conf_or_project(path: str | os.PathLike | None, name: str) -> str | os.PathLike | None:
    """``path`` when given, else the project's ``conf/<name>`` (:func:`project_conf`)."""
    return path or project_conf(name)


# --- the build's sizes: flag > --broker-conf > --conf > default ----------------------------------------------

# The sizes' names where a user gives them: the flag, and the key of the broker's properties file.
SIZE_FLAGS = {"hash_slot_num": ("--hash-slots", "maxHashSlotNum"), "index_num": ("--index-num", "maxIndexNum"),
              "cq_file_size": ("--cq-file-size", "mappedFileSizeConsumeQueue")}
_FROM_BROKER = {"hash_slot_num": "maxHashSlotNum", "index_num": "maxIndexNum",
                "cq_file_size": "mappedFileSizeConsumeQueue", "delay_levels": "messageDelayLevel"}


def build_settings(conf: str | os.PathLike | None = None, broker_conf: str | os.PathLike | None = None, *,
                   hash_slot_num: int | None = None, index_num: int | None = None, cq_file_size: int | None = None,
                   window_ms: int | None = None, timezone: str | None = None, check_crc: bool | None = None,
                   targets: str | tuple[str, ...] | None = None, release: BrokerRelease | None = None
                   ) -> tuple[BuildConfig, dict[str, str]]:
    """The build's settings and where each of the broker's four came from: a flag (the keywords; None: not
    given), else the broker's properties file (``broker_conf``), else ``conf``, else the default. The light
    queues come from the broker's file alone, under ``release``'s rules."""
    broker = broker_settings(broker_conf) if broker_conf else {}
    flags = {"hash_slot_num": hash_slot_num, "index_num": index_num, "cq_file_size": cq_file_size}
    from_broker = {k: broker.get(key) for k, key in _FROM_BROKER.items()}
    chosen = {k: flags.get(k) if flags.get(k) is not None else from_broker[k] for k in from_broker}
    try:
        cfg = load_config(conf, window_ms=window_ms, timezone=timezone, check_crc=check_crc, targets=targets, **chosen)
    except ConfigError as e:
        raise _as_given(e, conf, flags, from_broker) from None
    cfg = replace(cfg, light_queues=light_queues(broker, release or broker_release(None)),
                  batch_file_size=broker.get("mapperFileSizeBatchConsumeQueue", cfg.batch_file_size))
    in_conf = conf_settings(conf)
    said = {k: "flag" if flags.get(k) is not None else "broker-conf" if from_broker[k] is not None
            else "conf" if in_conf.get(k, getattr(BuildConfig(), k)) != getattr(BuildConfig(), k) else "default"
            for k in from_broker}
    return cfg, said


def _as_given(e: ConfigError, conf, flags: dict, from_broker: dict) -> ConfigError:
    """A settings error in the words the user gave them: ``--hash-slots`` rather than ``hash_slot_num``,
    the --broker-conf key or the --conf setting a value came from, and a default said to be one (a flag
    that makes an IndexFile too large used to be blamed on ``index_num``, a flag not given)."""
    names = str(e.option).split(", ")
    if not set(names) <= set(SIZE_FLAGS):
        return e
    values = e.value if len(names) > 1 else (e.value,)

    def named(name: str) -> tuple[str, bool]:
        """(where the value came from, as an option, e.g. ``--broker-conf maxHashSlotNum``; a default?)"""
        flag, key = SIZE_FLAGS[name]
        if flags.get(name) is not None:
            return flag, False
        if from_broker.get(name) is not None:
            return f"--broker-conf {key}", False
        if conf_settings(conf).get(name, getattr(BuildConfig(), name)) != getattr(BuildConfig(), name):
            return f"--conf {name}", False
        return flag, True
    given = sorted(zip(names, values), key=lambda fv: named(fv[0])[1])  # what the user gave first
    others = ", ".join(f"{named(f)[0]} {v}" + (" (the default)" if named(f)[1] else "") for f, v in given[1:])
    return ConfigError(named(given[0][0])[0], given[0][1], (f"with {others}, " if others else "") + e.reason)


def index_sizes(broker_conf: str | os.PathLike | None, hash_slot_num: int | None,
                index_num: int | None) -> tuple[dict, int | None, int | None]:
    """For the commands that read an index (stats, verify, query, backfill): the broker's settings ({}
    without ``broker_conf``), and ``hash_slot_num``/``index_num``, a flag's, else the file's (None: neither
    gave it, the files or the manifest will)."""
    if not broker_conf:
        return {}, hash_slot_num, index_num
    got = broker_settings(broker_conf)
    return (got, got.get("maxHashSlotNum") if hash_slot_num is None else hash_slot_num,
            got.get("maxIndexNum") if index_num is None else index_num)


# --- the time index: a directory, none, or "auto" ------------------------------------------------------------

TIME_INDEX_AUTO = "auto"  # a build's default: TIME_INDEX_DIR_NAME under a local output
TIME_INDEX_DIR_NAME = "_timeindex"  # under a build's output directory


def time_index_setting(flag: str | None) -> str | None:
    """``--time-index`` as the library takes it: unset is "auto", "none" is None, else the directory."""
    return TIME_INDEX_AUTO if flag is None else None if flag.lower() == "none" else flag


def time_index_dir(setting: str | os.PathLike | None, out: str | os.PathLike) -> str | None:
    """The directory a build to ``out`` reads and keeps its time index in: for "auto" ``OUT/_timeindex``, none
    for a URI output (its tasks write elsewhere than the driver reads); None: no time index."""
    if setting == TIME_INDEX_AUTO:
        return None if storage.is_uri(str(out)) else os.path.join(str(out), TIME_INDEX_DIR_NAME)
    return str(setting) if setting else None


# --- Spark's settings: conf/spark.json, then flags --------------------------------------------------------------

DEFAULT_SPLIT_BYTES = 128 * 1024**2  # an HDFS block: ~8 tasks per 1 GiB segment
# Where a local[2] session's fixed cost is paid back on the reference machine (bench/speed/bench_engine.py);
# conf/spark.json carries the same figure, this is for an installed package without conf/.
DEFAULT_BREAK_EVEN = int(8.5 * 1024**3)


@dataclass(frozen=True)
class SparkSettings:
    """Spark-side settings: how to split the CommitLog, how many writer partitions, and ``spark.*``."""

    split_bytes: int = DEFAULT_SPLIT_BYTES
    shuffle_partitions: int | None = None  # None: the session's default parallelism
    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    break_even: int = DEFAULT_BREAK_EVEN  # bytes to read from which a command picks Spark (rocketidx.build.engine)


def load_spark_settings(*paths: str | os.PathLike | None, **overrides) -> SparkSettings:
    """Settings from JSON files (later files win): top-level ``split_bytes``, ``shuffle_partitions``,
    ``master``, ``engine_break_even`` and a ``spark`` section of ``spark.*`` settings; then non-None
    ``overrides``."""
    split, parts, master, conf, break_even = DEFAULT_SPLIT_BYTES, None, None, {}, DEFAULT_BREAK_EVEN
    for path in paths:
        if path is None:
            continue
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ConfigError("spark_conf", str(path), f"cannot read: {e}") from e
        unknown = set(data) - {"split_bytes", "shuffle_partitions", "master", "spark", "index", "engine_break_even"}
        if unknown:
            raise ConfigError("spark_conf", str(path), f"unknown settings {sorted(unknown)}")
        if "split_bytes" in data:
            split = parse_size(data["split_bytes"], "split_bytes")
        if "engine_break_even" in data:
            break_even = parse_size(data["engine_break_even"], "engine_break_even")
        if data.get("shuffle_partitions"):
            parts = int(data["shuffle_partitions"])
        master = data.get("master", master)
        section = data.get("spark", {})
        if not isinstance(section, dict) or any(not str(k).startswith("spark.") for k in section):
            raise ConfigError("spark", section, "expected an object of spark.* settings")
        conf.update({str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in section.items()})
    settings = SparkSettings(split, parts, master, conf, break_even)
    kw = {k: v for k, v in overrides.items() if v is not None}
    if "split_bytes" in kw:
        kw["split_bytes"] = parse_size(kw["split_bytes"], "split_bytes")
    if kw.get("shuffle_partitions") is not None and int(kw["shuffle_partitions"]) < 1:
        raise ConfigError("shuffle_partitions", kw["shuffle_partitions"], "must be positive")
    return SparkSettings(**{**settings.__dict__, **kw})


def spark_settings(spark_conf: str | os.PathLike | None = None, *, split_bytes: int | None = None,
                   partitions: int | None = None, master: str | None = None) -> SparkSettings:
    """``--spark-conf`` (default ``conf/spark.json``), then the flags."""
    return load_spark_settings(conf_or_project(spark_conf, "spark.json"), split_bytes=split_bytes,
                               shuffle_partitions=partitions, master=master)


# --- what runs an operation: this process or Spark ---------------------------------------------------------------

@dataclass(frozen=True)
class EngineRequest:
    """The engine flags of an operation, resolved: ``--in-process``, ``--master``, ``--spark`` (verify's: Spark
    whatever the size) and the Spark settings (None where --in-process leaves Spark out: none were read).
    :func:`rocketidx.ops.engine.engine_for` turns them and the bytes to read into the engine."""

    in_process: bool = False
    master: str | None = None
    spark_flag: bool = False
    spark: SparkSettings | None = None
    workers: int | None = None  # processes an in-process build runs on (rocketidx.build.pool); None: by size

    @property
    def settings(self) -> SparkSettings:
        return self.spark or SparkSettings()


def engine_request(*, in_process: bool = False, master: str | None = None, spark_flag: bool = False,
                   spark_conf: str | os.PathLike | None = None, split_bytes: int | None = None,
                   partitions: int | None = None, read_spark_conf: bool = True,
                   workers: int | None = None) -> EngineRequest:
    """The engine flags, and the Spark settings unless ``read_spark_conf`` is False (the build does not read
    them for ``--in-process``, where a Spark flag is its usage error; statistics of queues never use them)."""
    if workers is not None and workers < 1:
        raise ConfigError("--workers", workers, "must be at least 1")
    spark = spark_settings(spark_conf, split_bytes=split_bytes, partitions=partitions, master=master) \
        if read_spark_conf else None
    return EngineRequest(in_process, master, spark_flag, spark, workers)


# --- the backfill's request ---------------------------------------------------------------------------------

BACKFILL_TARGETS = ("index", "consumequeue")


@dataclass(frozen=True)
class BackfillRequest:
    """Everything a repair of a stopped broker's store needs, resolved (:func:`backfill_request`): the store,
    what to repair (in :data:`BACKFILL_TARGETS` order), the index's sizes (a flag's, else the broker's conf,
    else None: read off the store's files), the queue file size and delay levels (a flag's or the broker's),
    the new files' window and zone, the broker's release and the engine flags."""

    store: str
    targets: tuple[str, ...] = BACKFILL_TARGETS
    dry_run: bool = False
    window_ms: int = 0
    hash_slot_num: int | None = None
    index_num: int | None = None
    timezone: str = "local"
    check_crc: bool = True
    remove_unexplained: bool = False
    cq_file_size: int | None = None
    delay_levels: str = L.DEFAULT_DELAY_LEVELS
    release: BrokerRelease = BrokerRelease(None, "5.x", False)
    engine: EngineRequest = EngineRequest()
    light_queues: LightQueues | None = None  # the broker's enableMultiDispatch: its light queues are rebuilt too
    batch_file_size: int | None = None  # the broker conf's mapperFileSizeBatchConsumeQueue (None: not given)
    queue_store: str = "files"  # rocksdb: the broker's storeType=defaultRocksDB (rocketidx.backfill.rocksdb)
    rocksdb_compression: tuple[str, str] = ("lz4", "zstd")
    rocksdb_light_queues: LightQueues | None = None  # with enableLmq, the light queues a RocksDB store holds


def backfill_request(store: str | os.PathLike, *, targets: str = ",".join(BACKFILL_TARGETS), dry_run: bool = False,
                     window_ms: int = 0, hash_slot_num: int | None = None, index_num: int | None = None,
                     timezone: str = "local", check_crc: bool = True, remove_unexplained: bool = False,
                     cq_file_size: int | None = None, broker_conf: str | os.PathLike | None = None,
                     broker_version: str | None = None, in_process: bool = False, master: str | None = None,
                     spark_conf: str | os.PathLike | None = None, split_bytes: int | None = None,
                     partitions: int | None = None) -> BackfillRequest:
    """A :class:`BackfillRequest` from a command's or a job's values (None: not given; ``targets`` as
    ``--targets`` spells it)."""
    wanted = {t.strip() for t in str(targets).split(",") if t.strip()}
    if not wanted or wanted - set(BACKFILL_TARGETS):
        raise ConfigError("--targets", targets, "index, consumequeue, or index,consumequeue")
    broker, hash_slot_num, index_num = index_sizes(broker_conf, hash_slot_num, index_num)
    size = cq_file_size or broker.get("mappedFileSizeConsumeQueue")
    return BackfillRequest(
        str(store), tuple(t for t in BACKFILL_TARGETS if t in wanted), dry_run, window_ms, hash_slot_num, index_num,
        timezone, check_crc, remove_unexplained, size and L.cq_file_size(size),
        broker.get("messageDelayLevel", L.DEFAULT_DELAY_LEVELS), broker_release(broker_version),
        engine_request(in_process=in_process, master=master, spark_conf=spark_conf, split_bytes=split_bytes,
                       partitions=partitions), light_queues(broker, broker_release(broker_version)),
        broker.get("mapperFileSizeBatchConsumeQueue"), queue_store(broker), rocksdb_compression(broker),
        rocksdb_light_queues(broker, broker_release(broker_version)))


# --- the build's request ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuildRequest:
    """Everything a build needs, resolved (:func:`build_request`): the input and output, the files' settings
    and where the broker's four came from, the range, the time index, the output's safety, the broker's
    release and the engine flags. ``time_index``: the directory (None: none); ``time_index_given``: it was
    named (so it is checked like an output), not the default under ``out``."""

    commitlog: str
    out: str
    config: BuildConfig = BuildConfig()
    settings_from: Mapping[str, str] = field(default_factory=dict)
    from_offset: int | None = None
    to_offset: int | None = None
    from_time_ms: int | None = None
    to_time_ms: int | None = None
    time_index: str | None = None
    time_index_given: bool = False
    overwrite: bool = False
    strict: bool = False
    broker_conf: str | None = None
    release: BrokerRelease = BrokerRelease(None, "5.x", False)
    engine: EngineRequest = EngineRequest()
    full: bool = False  # read the whole log even where the output's earlier build could be brought up to date

    @property
    def filters(self) -> dict:
        """The range's bounds that are set, as the manifest records them."""
        return {k: v for k, v in (("from_offset", self.from_offset), ("to_offset", self.to_offset),
                                  ("from_time_ms", self.from_time_ms), ("to_time_ms", self.to_time_ms))
                if v is not None}


def build_request(commitlog: str | os.PathLike, out: str | os.PathLike, *, conf: str | os.PathLike | None = None,
                  broker_conf: str | os.PathLike | None = None, broker_version: str | None = None,
                  hash_slot_num: int | None = None, index_num: int | None = None, cq_file_size: int | None = None,
                  window_ms: int | None = None, timezone: str | None = None, check_crc: bool | None = None,
                  targets: str | None = None, from_offset: int | None = None, to_offset: int | None = None,
                  from_time_ms: int | None = None, to_time_ms: int | None = None, time_index: str | None = None,
                  overwrite: bool = False, strict: bool = False, in_process: bool = False, master: str | None = None,
                  spark_conf: str | os.PathLike | None = None, split_bytes: int | None = None,
                  partitions: int | None = None, topic_config: str | os.PathLike | None = None,
                  workers: int | None = None, full: bool = False) -> BuildRequest:
    """A :class:`BuildRequest` from a command's or a job's values (None: not given; ``time_index`` as the
    ``--time-index`` flag spells it: None for the default, "none", or a directory; ``topic_config``: the
    broker's topics.json, whose BatchCQ topics get batch consume queues)."""
    release = broker_release(broker_version)
    cfg, said = build_settings(conf, broker_conf, hash_slot_num=hash_slot_num, index_num=index_num,
                               cq_file_size=cq_file_size, window_ms=window_ms, timezone=timezone,
                               check_crc=check_crc, targets=targets, release=release)
    if topic_config is not None:
        cfg = replace(cfg, batch_topics=batch_topics_of(topic_config))
    setting = time_index_setting(time_index)
    return BuildRequest(
        str(commitlog), str(out), cfg, said, from_offset, to_offset, from_time_ms, to_time_ms,
        time_index_dir(setting, out), setting not in (None, TIME_INDEX_AUTO), overwrite, strict,
        None if broker_conf is None else str(broker_conf), release,
        engine_request(in_process=in_process, master=master, spark_conf=spark_conf, split_bytes=split_bytes,
                       partitions=partitions, read_spark_conf=not in_process, workers=workers), full)


# --- statistics ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StatsRequest:
    """What ``stats`` needs, resolved (:func:`stats_request`): the index (or the ConsumeQueues) to describe,
    the CommitLog for key strings and topics, the sizes (flag, else --broker-conf; None: the files'), the
    time bucket, how many hot keys and chains, the sizing targets, the CRC check and the engine flags."""

    index: str | None = None
    consumequeue: str | None = None
    commitlog: str | None = None
    hash_slot_num: int | None = None
    index_num: int | None = None
    bucket_ms: int | None = None
    top: int = 10
    target_chain: float = 1.5
    target_files_per_day: float = 24.0
    headroom: float = 2.0
    check_crc: bool = True
    engine: EngineRequest = EngineRequest()


def stats_request(index: str | None = None, *, consumequeue: str | None = None, commitlog: str | None = None,
                  broker_conf: str | os.PathLike | None = None, hash_slot_num: int | None = None,
                  index_num: int | None = None, bucket_ms: int | None = None, top: int = 10,
                  target_chain: float = 1.5, target_files_per_day: float = 24.0, headroom: float = 2.0,
                  check_crc: bool = True, in_process: bool = False, master: str | None = None,
                  spark_conf: str | os.PathLike | None = None) -> StatsRequest:
    """A :class:`StatsRequest` from a command's values (None: not given). Queue statistics run in process:
    they read no Spark settings."""
    _, hash_slot_num, index_num = index_sizes(broker_conf, hash_slot_num, index_num)
    return StatsRequest(index, consumequeue, commitlog, hash_slot_num, index_num, bucket_ms, top, target_chain,
                        target_files_per_day, headroom, check_crc,
                        engine_request(in_process=in_process, master=master, spark_conf=spark_conf,
                                       read_spark_conf=not consumequeue))


# --- verification ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class VerifyRequest:
    """What ``verify`` needs, resolved (:func:`verify_request`): one of an index, ConsumeQueues or a stopped
    broker's store to check, the CommitLog to check an index or queues against, the sizes (flag, else
    --broker-conf; None: the files'), the broker's settings and where they came from, its release, the CRC
    check and the engine flags (``--spark``: Spark whatever the size)."""

    index: str | None = None
    consumequeue: str | None = None
    store: str | None = None
    commitlog: str | None = None
    hash_slot_num: int | None = None
    index_num: int | None = None
    broker: Mapping[str, object] = field(default_factory=dict)
    broker_conf: str | None = None
    broker_version: str | None = None
    check_crc: bool = True
    engine: EngineRequest = EngineRequest()

    @property
    def delay_levels(self) -> str | None:
        """The broker's messageDelayLevel, when its properties file sets it (None: the broker's default)."""
        return self.broker.get("messageDelayLevel")

    @property
    def light_queues(self) -> LightQueues | None:
        """The light queues the broker's settings and release make (None: no enableMultiDispatch)."""
        return light_queues(self.broker, broker_release(self.broker_version))


def verify_request(*, index: str | None = None, consumequeue: str | None = None, store: str | None = None,
                   commitlog: str | None = None, broker_conf: str | os.PathLike | None = None,
                   broker_version: str | None = None, hash_slot_num: int | None = None,
                   index_num: int | None = None, check_crc: bool = True, in_process: bool = False,
                   spark: bool = False, master: str | None = None, spark_conf: str | os.PathLike | None = None,
                   split_bytes: int | None = None) -> VerifyRequest:
    """A :class:`VerifyRequest` from a command's values (None: not given). No Spark settings are read where
    Spark cannot run: ``--in-process``, and queue files checked without a CommitLog (a Spark flag there is
    the command's usage error)."""
    broker, hash_slot_num, index_num = index_sizes(broker_conf, hash_slot_num, index_num)
    return VerifyRequest(index, consumequeue, store, commitlog, hash_slot_num, index_num, broker,
                         None if broker_conf is None else str(broker_conf), broker_version, check_crc,
                         engine_request(in_process=in_process, master=master, spark_flag=spark, spark_conf=spark_conf,
                                        split_bytes=split_bytes,
                                        read_spark_conf=not in_process and not (consumequeue and not commitlog)))


# --- lookups ---------------------------------------------------------------------------------------------------

MAX_MSGS_NUM_BATCH = L.DEFAULT_MAX_MSGS_NUM_BATCH  # maxMsgsNumBatch: the most offsets a broker's query answers

@dataclass(frozen=True)
class QueryRequest:
    """What ``query`` needs, resolved (:func:`query_request`). Keys: the index (``--index``, or a store's
    ``index/``), the CommitLog for ``show``/``exact`` (``--commitlog``, or the store's), the lookups (each a
    dict of topic, key or tag, begin, end, maxNum), the sizes (flag, else --broker-conf) and the broker's
    release (a tag lookup needs 5.4+'s tag entries). Queue slots (``consumequeue``): the queues, the CommitLog
    beside them if given, and one lookup (``queue_lookup``: topic, queue id, queue offset) or a file of them
    (``queue_lookups_file``)."""

    index: str | None = None
    commitlog: str | None = None
    lookups: tuple[Mapping, ...] = ()
    show: bool = False
    exact: bool = False
    hash_slot_num: int | None = None
    index_num: int | None = None
    release: BrokerRelease = BrokerRelease(None, "5.x", False)
    consumequeue: str | None = None
    queue_lookup: tuple | None = None
    queue_lookups_file: str | None = None


def query_request(*, index: str | None = None, store: str | None = None, commitlog: str | None = None,
                  lookups=(), show: bool = False, exact: bool = False, broker_conf: str | os.PathLike | None = None,
                  broker_version: str | None = None, hash_slot_num: int | None = None, index_num: int | None = None,
                  consumequeue: str | None = None, queue_lookup: tuple | None = None,
                  queue_lookups_file: str | None = None) -> QueryRequest:
    """A :class:`QueryRequest` from a command's values (None: not given); ``store`` stands for its ``index/``
    and ``commitlog/`` where ``index``/``commitlog`` are not given."""
    _, hash_slot_num, index_num = index_sizes(broker_conf, hash_slot_num, index_num)
    if not consumequeue:
        index = index or (storage.join(store, "index") if store else None)
        commitlog = commitlog or (storage.join(store, "commitlog") if store else None)
    return QueryRequest(index, commitlog, tuple(lookups), show, exact, hash_slot_num, index_num,
                        broker_release(broker_version), consumequeue, queue_lookup, queue_lookups_file)


# --- the time index -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TimeIndexRequest:
    """What ``timeindex`` needs (:func:`timeindex_request`): the CommitLog, the index directory, the block
    size (None: the default, or with ``check`` each file's own), the CRC check, and whether to check only."""

    commitlog: str
    out: str
    block_bytes: int | None = None
    check_crc: bool = True
    check: bool = False


def timeindex_request(commitlog: str, out: str, *, block_bytes: int | None = None, check_crc: bool = True,
                      check: bool = False) -> TimeIndexRequest:
    """A :class:`TimeIndexRequest` from a command's values (None: not given)."""
    return TimeIndexRequest(str(commitlog), str(out), block_bytes, check_crc, check)


# --- paths --------------------------------------------------------------------------------------------------

# Arguments that name a path or URI: resolved here (resolve_paths), once for every command and both jobs.
PATH_ARGS = ("out", "commitlog", "index", "store", "consumequeue", "queries", "dir", "conf", "spark_conf",
             "broker_conf", "time_index", "topic_config")


def resolve_paths(args) -> None:
    """Every :data:`PATH_ARGS` attribute of ``args`` (a command's or a job's parsed arguments) as
    :func:`rocketidx.storage.resolve` gives it: a ``file://`` URI its local path, a relative path absolute
    against the working directory the command was typed in (so Spark tasks, a manifest and ``--json`` all
    see the path the user meant, from any directory), a URI as given. Called before a command runs, inside
    :func:`rocketidx.cli.exit_code`: a bad ``file://`` URI is exit 2."""
    for name in PATH_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value.lower() not in WORDS_NOT_PATHS.get(name, ()):
            setattr(args, name, storage.resolve(value))


# Values of a path flag that are words, not paths (``--time-index none``): left as typed.
WORDS_NOT_PATHS = {"time_index": ("none",)}
