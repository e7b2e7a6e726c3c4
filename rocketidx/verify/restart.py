"""A stopped broker's store -> what its next start dispatches again, into the queues and into the index.

In: the CommitLog's segments, whether ``abort`` is there (a crash), the checkpoint, the queues' highest end
(``ConsumeQueueStore.getDispatchFromPhyOffset``), the IndexFiles (oldest first), the broker's switches from
``--broker-conf`` and the release line. Out: a :class:`RestartModel`: which records the restart dispatches
(every valid record at or past ``redispatch_from``), which IndexFiles its load deletes, and from which offset
the index takes them (``reindex_from``); each statement with the Java method and line it comes from, for
``verify --store --json`` (the real-brokers tests read them there).

The model, in RocketMQ's own terms (5.x: apache/rocketmq 8fc57f1; 4.9.x: rocketmq-all-4.9.8):

* ``D``, the queues' highest end: each queue's ``recover`` walks from its third-last file to the first unit
  with offset < 0 or size <= 0, and its maxPhysicOffset is offset + size of the last unit before it; D is
  the highest of them, -1 without queues.
* A clean stop (no ``abort``), 5.x: ``recoverNormally(D)`` dispatches the records whose offset is greater
  than D, strictly; ``start()`` then resumes at ``getConfirmOffset()``, the log's end (flushed end with
  SYNC_FLUSH, which recovery sets to the same place); ``recheckReputOffsetFromCq`` is off by default.
  4.9.x: ``recoverNormally`` dispatches nothing, ``start()`` resumes at max(D, the log's first offset, 0),
  that record included.
* A crash (``abort``): ``IndexService.load(false)`` deletes every IndexFile whose endTimestamp is past the
  checkpoint's indexMsgTimestamp; ``recoverAbnormally`` dispatches every record from the base of the newest
  segment whose first record is valid, stored at a non-zero time at or before min(physicMsgTimestamp,
  logicsMsgTimestamp) - 3 s floored at 0 (with messageIndexEnable and messageIndexSafe, also at or before
  indexMsgTimestamp), else from the first segment.
* The index takes a dispatched record when its offset is at or past the last IndexFile's endPhyOffset
  (``IndexService.buildIndex``; 0 without files): so from ``reindex_from`` = max(that, redispatch_from) on.
  The record at exactly that end is indexed again (its entries twice), which loses nothing.
* A queue takes a dispatched record only past its own end (``putMessagePositionInfo``: offset + size must
  pass its maxPhysicOffset): a queue entry missing below its end stays missing.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

VERSIONS = ("5.x", "5.5.x", "4.9.x")  # the release lines the model knows; 5.x (8fc57f1) is the default
RECOVER_MAX_SEGMENTS = 10  # 5.4.0 on: commitLogRecoverMaxNum, how far back either recovery looks

# Where each statement comes from, per release line: "Class.method (File.java:line)".
JAVA = {
    "5.x": {
        "queues_end": "ConsumeQueueStore.getMaxPhyOffsetInConsumeQueue (ConsumeQueueStore.java:286), "
                      "ConsumeQueue.recover (ConsumeQueue.java:133-156)",
        "clean": "CommitLog.recoverNormally (CommitLog.java:374: doDispatch = commitLogOffset > dispatchFromPhyOffset); "
                 "DefaultMessageStore.start (DefaultMessageStore.java:400: reput from getConfirmOffset)",
        "crash": "CommitLog.recoverAbnormally (CommitLog.java:731-780), isMappedFileMatchedRecover (CommitLog.java:883), "
                 "ConsumeQueueStore.isMappedFileMatchedRecover (ConsumeQueueStore.java:598), "
                 "StoreCheckpoint.getMinTimestamp (StoreCheckpoint.java:127)",
        "index_load": "IndexService.load (IndexService.java:70: endTimestamp > indexMsgTimestamp deleted)",
        "index_take": "IndexService.buildIndex (IndexService.java:216: commitLogOffset < endPhyOffset skipped)",
        "queue_take": "ConsumeQueue.putMessagePositionInfo (ConsumeQueue.java:800: offset + size <= maxPhysicOffset skipped)",
    },
    "5.5.x": {
        "queues_end": "ConsumeQueueStore.getMaxPhyOffsetInConsumeQueue (ConsumeQueueStore.java:300), "
                      "ConsumeQueue.recover (ConsumeQueue.java:132)",
        "clean": "CommitLog.recoverNormally (CommitLog.java:340-371: doDispatch = commitLogOffset > dispatchFromPhyOffset); "
                 "DefaultMessageStore.start (DefaultMessageStore.java:444: reput from getConfirmOffset)",
        "crash": "CommitLog.recoverAbnormally (CommitLog.java:738-760: at most commitLogRecoverMaxNum = 10 segments back), "
                 "ConsumeQueueStore.isMappedFileMatchedRecover (ConsumeQueueStore.java:625-631: the first record's offset "
                 "<= the checkpoint's logicsPhysicalOffset, or with that 0 its storeTimestamp <= logicsMsgTimestamp), "
                 "IndexService.isMappedFileMatchedRecover (IndexService.java:432-444)",
        "index_load": "IndexService.load (IndexService.java:73: endTimestamp > indexMsgTimestamp deleted)",
        "index_take": "IndexService.buildIndex (IndexService.java:231: commitLogOffset < endPhyOffset skipped)",
        "queue_take": "ConsumeQueue.putMessagePositionInfo (ConsumeQueue.java:802: offset + size <= maxPhysicOffset skipped)",
    },
    "4.9.x": {
        "queues_end": "DefaultMessageStore.start (DefaultMessageStore.java:252-277), ConsumeQueue.recover",
        "clean": "CommitLog.recoverNormally (CommitLog.java:210: dispatches nothing); DefaultMessageStore.start "
                 "(DefaultMessageStore.java:277: reput from max(queues' highest end, the log's first offset))",
        "crash": "CommitLog.recoverAbnormally (CommitLog.java:467-510), isMappedFileMatchedRecover (CommitLog.java:552)",
        "index_load": "IndexService.load (IndexService.java:69: endTimestamp > indexMsgTimestamp deleted)",
        "index_take": "IndexService.buildIndex (IndexService.java:208: commitLogOffset < endPhyOffset skipped)",
        "queue_take": "ConsumeQueue.putMessagePositionInfo (offset + size <= maxPhysicOffset skipped)",
    },
}


@dataclass(frozen=True)
class BrokerSwitches:
    """The broker settings a restart depends on, from ``--broker-conf`` (:func:`rocketidx.config.broker_settings`)."""

    message_index_enable: bool = True
    message_index_safe: bool = False
    flush_disk_type: str = "ASYNC_FLUSH"
    source: str = "the broker's defaults (no --broker-conf)"

    @classmethod
    def of(cls, settings: dict | None, source: str | None = None) -> BrokerSwitches:
        settings = settings or {}
        d = cls()
        return cls(settings.get("messageIndexEnable", d.message_index_enable),
                   settings.get("messageIndexSafe", d.message_index_safe),
                   settings.get("flushDiskType", d.flush_disk_type), source or d.source)


def broker_version(text: str | None) -> str:
    """``5``, ``5.3.2``, ``4.9.8`` ... -> the model's release line (``5.x`` or ``4.9.x``)."""
    from rocketidx.config import broker_release
    return broker_release(text).line


@dataclass
class RestartModel:
    kind: str  # clean | crash
    version: str
    switches: BrokerSwitches
    dispatch_from_phy_offset: int  # D: the queues' highest end, -1 without queues
    redispatch_from: int | None  # every valid record at or past this offset is dispatched again; None: none
    log_end: int
    index_deleted: list[str] = field(default_factory=list)  # IndexFiles the load deletes (a crash)
    index_end_phy_offset: int = 0  # E: the last remaining IndexFile's endPhyOffset (0 without one)
    reindex_from: int | None = None  # the index takes dispatched records from here on; None: none
    how: str = ""

    def statements(self) -> list[dict]:
        j = JAVA[self.version]
        out = [{"what": f"the queues' highest end D = {self.dispatch_from_phy_offset}", "java": j["queues_end"]}]
        if self.redispatch_from is None:
            out.append({"what": "no record is dispatched again", "java": j[self.kind]})
        else:
            out.append({"what": f"every valid record from offset {self.redispatch_from} to the log's end "
                                f"{self.log_end} is dispatched again ({self.how})", "java": j[self.kind]})
        out.append({"what": "a queue takes a dispatched record only past its own end", "java": j["queue_take"]})
        if self.kind == "crash":
            out.append({"what": f"the load deletes {len(self.index_deleted)} IndexFiles", "java": j["index_load"]})
        if not self.switches.message_index_enable:
            out.append({"what": "messageIndexEnable=false: nothing is indexed", "java": "DefaultMessageStore"})
        elif self.reindex_from is None:
            out.append({"what": "the index takes no record", "java": j["index_take"]})
        else:
            out.append({"what": f"the index takes the dispatched records from offset {self.reindex_from} on "
                                f"(its last file's endPhyOffset {self.index_end_phy_offset})", "java": j["index_take"]})
        return out

    def as_dict(self) -> dict:
        d = asdict(self)
        d["statements"] = self.statements()
        return d


def restart_model(*, abort: bool, version: str, switches: BrokerSwitches, queues_end: int, segments,
                  log_end: int, checkpoint: dict | None, index_files, first_store_time) -> RestartModel:
    """The model (see the module docstring). ``index_files``: the store's IndexFiles, oldest first (objects
    with ``name`` and ``header``); ``first_store_time(segment)``: the store time of the segment's first
    record when it is valid, else None."""
    D = queues_end
    first = segments[0].base_offset if segments else 0
    kept, deleted = list(index_files), []
    if abort:
        index_ts = (checkpoint or {}).get("index_msg_timestamp_ms", 0)
        deleted = [f.name for f in kept if f.header.end_timestamp > index_ts]
        kept = [f for f in kept if f.header.end_timestamp <= index_ts]
        start, how = (_crash_start_55(segments, checkpoint, switches, first_store_time) if version == "5.5.x"
                      else _crash_start(segments, checkpoint, switches, first_store_time))
    elif version == "4.9.x":
        start, how = max(D, first, 0), "a clean stop: start() resumes at the queues' highest end"
    else:
        start, how = D + 1, "a clean stop: recoverNormally dispatches records past the queues' highest end"
    if start is not None and start >= log_end:
        start = None
    E = kept[-1].header.end_phy_offset if kept else 0
    reindex = None
    if switches.message_index_enable and start is not None:
        reindex = max(E, start)
    return RestartModel("crash" if abort else "clean", version, switches, D, start, log_end, deleted, E,
                        reindex, how)


def _crash_start_55(segments, checkpoint: dict | None, switches: BrokerSwitches, first_store_time):
    """5.5.0: the newest segment whose first record is at or below the checkpoint's logicsPhysicalOffset
    (byte 40; with it 0, stored by logicsMsgTimestamp), and with messageIndexSafe stored by
    indexMsgTimestamp; looking back at most 10 segments, the 10th is taken when none matches."""
    cp = checkpoint or {}
    logics_phy = cp.get("logics_physical_offset", 0)
    safe = switches.message_index_enable and switches.message_index_safe
    if not segments:
        return None, "a crash, and no CommitLog"
    left = RECOVER_MAX_SEGMENTS
    for i in range(len(segments) - 1, -1, -1):
        seg = segments[i]
        left -= 1
        ts = first_store_time(seg)
        ok = ts is not None and ts != 0 and (
            seg.base_offset <= logics_phy if logics_phy > 0 else ts <= cp.get("logics_msg_timestamp_ms", 0)) and (
            not safe or ts <= cp.get("index_msg_timestamp_ms", 0))
        if ok:
            rule = (f"at or below logicsPhysicalOffset {logics_phy}" if logics_phy > 0 else
                    f"stored by logicsMsgTimestamp {cp.get('logics_msg_timestamp_ms', 0)} (logicsPhysicalOffset 0)")
            return seg.base_offset, f"a crash: recoverAbnormally starts at the newest segment whose first message is {rule}"
        if left <= 0:
            return seg.base_offset, (f"a crash: recoverAbnormally looks back {RECOVER_MAX_SEGMENTS} segments at most "
                                     "and starts at the last it looked at")
    return segments[0].base_offset, "a crash, and no segment matches: the first segment"


def _crash_start(segments, checkpoint: dict | None, switches: BrokerSwitches, first_store_time):
    cp = checkpoint or {}
    bound = max(0, min(cp.get("physic_msg_timestamp_ms", 0), cp.get("logics_msg_timestamp_ms", 0)) - 3000)
    if switches.message_index_enable and switches.message_index_safe:
        bound = min(bound, cp.get("index_msg_timestamp_ms", 0))
    for seg in reversed(segments):
        ts = first_store_time(seg)
        if ts is not None and ts != 0 and ts <= bound:
            return seg.base_offset, (f"a crash: recoverAbnormally starts at the newest segment whose first message "
                                     f"is stored by {bound}")
    if not segments:
        return None, "a crash, and no CommitLog"
    return segments[0].base_offset, "a crash, and no segment starts before the checkpoint: the first segment"
