"""Every on-disk layout rocketidx reads or writes, declared once.

CommitLog record (``CommitLog.checkMessageAndReturnSize`` / ``MessageExtEncoder``), big-endian::

    | TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 | PHYSICALOFFSET 8 |
    | SYSFLAG 4 | BORNTIMESTAMP 8 |                                             = RECORD_PREFIX, 48 B
    | BORNHOST 8 or 20 | STORETIMESTAMP 8 | STOREHOST 8 or 20 | RECONSUMETIMES 4 |
    | PREPAREDTRANSACTIONOFFSET 8 | BODYLENGTH 4 | BODY | TOPICLENGTH 1 (v1) or 2 (v2) | TOPIC |
    | PROPERTIESLENGTH 2 | PROPERTIES |

IndexFile (``org.apache.rocketmq.store.index.IndexFile`` / ``IndexHeader``)::

    | header 40 B | hash_slot_num x 4 B slots | index_num x 20 B items |
    header: begin_timestamp_ms 8 | end_timestamp_ms 8 | begin_phy_offset 8 | end_phy_offset 8 |
            hash_slot_count 4 | index_count 4
    item:   key_hash 4 | phy_offset 8 | time_diff_s 4 | prev_index 4

RocketMQ quirks this project reproduces (each pinned by a test in tests/unit/test_layout_quirks.py):

* item 0 is never used: ``index_count`` starts at 1, so a file holds ``index_num - 1`` entries
  (``IndexHeader``/``IndexFile.putKey``);
* a slot value of 0 means "empty"; a slot value ``<= 0`` or ``> index_count`` is treated as empty
  (``IndexFile.putKey``/``selectPhyOffset``);
* ``time_diff_s = (store_ts - begin_ts) / 1000`` with Java long division, forced to 0 when the header's
  begin timestamp is ``<= 0``, capped at ``2^31 - 1``, 0 when negative (``IndexFile.putKey``);
* the header's begin timestamp/offset are set from the first entry *after* its time diff was computed,
  so a file's first entry has time diff 0, or, in a rolled file, the diff from the seeded begin
  (``IndexFile.putKey``);
* the key hash is ``Math.abs(String.hashCode())`` and ``Integer.MIN_VALUE`` maps to 0
  (``IndexFile.indexKeyHashMethod``);
* a file that follows a full file of the same window starts with begin/end offset and timestamp seeded
  from the full file's end (``IndexService.getAndCreateLastIndexFile``);
* a CommitLog record's body CRC is ``CRC32(body) & 0x7FFFFFFF`` (``UtilAll.crc32``).
"""
from __future__ import annotations

import struct
from typing import Final

import numpy as np

# --- CommitLog ----------------------------------------------------------------------------------

MAGIC_V1: Final = 0xDAA320A7  # MessageDecoder.MESSAGE_MAGIC_CODE
MAGIC_V2: Final = 0xDAA320AB  # MessageDecoder.MESSAGE_MAGIC_CODE_V2 (2-byte topic length)
MAGIC_BLANK: Final = 0xCBD43194  # CommitLog.BLANK_MAGIC_CODE: rest of the segment is padding
BLANK_RECORD_SIZE: Final = 8  # TOTALSIZE + MAGICCODE of a blank record

RECORD_PREFIX: Final = np.dtype([  # the fixed first 48 bytes of every message record
    ("total_size", ">i4"),
    ("magic", ">u4"),
    ("body_crc", ">i4"),
    ("queue_id", ">i4"),
    ("flag", ">i4"),
    ("queue_offset", ">i8"),
    ("phy_offset", ">i8"),
    ("sys_flag", ">i4"),
    ("born_timestamp_ms", ">i8"),
])
assert RECORD_PREFIX.itemsize == 48

IPV4_HOST_BYTES: Final = 8  # 4 address + 4 port
IPV6_HOST_BYTES: Final = 20  # 16 address + 4 port
# After the two hosts: STORETIMESTAMP 8 sits between them; after the store host come these.
RECORD_AFTER_HOSTS: Final = np.dtype([
    ("reconsume_times", ">i4"),
    ("prepared_tx_offset", ">i8"),
    ("body_length", ">i4"),
])
STORE_TIMESTAMP_BYTES: Final = 8
PROPERTIES_LENGTH_BYTES: Final = 2

SYSFLAG_COMPRESSED: Final = 0x1
SYSFLAG_MULTI_TAGS: Final = 0x2
SYSFLAG_TX_MASK: Final = 0xC  # 0 not-tx, 0x4 prepared, 0x8 commit, 0xC rollback
SYSFLAG_TX_PREPARED: Final = 0x4
SYSFLAG_TX_COMMIT: Final = 0x8
SYSFLAG_TX_ROLLBACK: Final = 0xC
SYSFLAG_BORNHOST_V6: Final = 0x10
SYSFLAG_STOREHOST_V6: Final = 0x20
SYSFLAG_INNER_BATCH: Final = 0x80

PROPERTY_SEPARATOR: Final = "\x02"  # MessageDecoder.PROPERTY_SEPARATOR
NAME_VALUE_SEPARATOR: Final = "\x01"  # MessageDecoder.NAME_VALUE_SEPARATOR
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_TAGS: Final = "TAGS"
INDEX_TAG_TYPE: Final = "T"  # MessageConst.INDEX_TAG_TYPE (5.4.0 on): the tag entry's key is topic#T#TAGS
KEY_SEPARATOR: Final = " "  # MessageConst.KEY_SEPARATOR: only U+0020 splits KEYS


def record_length(magic_v2, born_v6, store_v6, body_length, topic_length, properties_length):
    """The length a record must have from its field lengths (``MessageExtEncoder.calMsgLength``).

    Works on numpy arrays or scalars alike.
    """
    return (RECORD_PREFIX.itemsize
            + np.where(born_v6, IPV6_HOST_BYTES, IPV4_HOST_BYTES)
            + STORE_TIMESTAMP_BYTES
            + np.where(store_v6, IPV6_HOST_BYTES, IPV4_HOST_BYTES)
            + RECORD_AFTER_HOSTS.itemsize
            + body_length
            + np.where(magic_v2, 2, 1) + topic_length
            + PROPERTIES_LENGTH_BYTES + properties_length)


# Smallest possible message record: IPv4 hosts, empty body, empty topic, no properties (v1).
MIN_RECORD_SIZE: Final = int(record_length(False, False, False, 0, 0, 0))


def _struct_of(dtype: np.dtype) -> struct.Struct:
    """The same big-endian layout as a ``struct.Struct``, for packing one record at a time (the
    generator): derived from the dtype, so the two cannot disagree."""
    codes = {"i2": "h", "i4": "i", "u4": "I", "i8": "q"}
    packed = struct.Struct(">" + "".join(codes[dtype.fields[n][0].str[1:]] for n in dtype.names))
    assert packed.size == dtype.itemsize
    return packed


RECORD_PREFIX_STRUCT: Final = _struct_of(RECORD_PREFIX)
RECORD_AFTER_HOSTS_STRUCT: Final = _struct_of(RECORD_AFTER_HOSTS)

# --- Records array: what the reader keeps of every valid record ------------------------------------
# One int64 row per record, positions inside its segment (``*_POS``) and lengths (``*_LEN``, -1 when a
# property is absent). Both read paths (numpy and rocketidx/_native.c, whose REC_* enum mirrors this)
# produce it, and everything downstream (message columns, entries, counters) reads it. Column order:
REC_POS: Final = 0  # segment offset of the record
REC_TOTAL: Final = 1  # TOTALSIZE
REC_V2: Final = 2  # 1 for a v2 magic code (2-byte topic length)
REC_SYSFLAG: Final = 3
REC_BODY_POS: Final = 4
REC_BODY_LEN: Final = 5
REC_TOPIC_POS: Final = 6
REC_TOPIC_LEN: Final = 7
REC_PROPS_POS: Final = 8
REC_PROPS_LEN: Final = 9
REC_KEYS_POS: Final = 10  # the KEYS property's value
REC_KEYS_LEN: Final = 11
REC_UNIQ_POS: Final = 12  # the UNIQ_KEY property's value
REC_UNIQ_LEN: Final = 13
REC_TAGS_POS: Final = 14
REC_TAGS_LEN: Final = 15
REC_PHY: Final = 16  # the stored PHYSICALOFFSET field
REC_STORE_TS: Final = 17  # STORETIMESTAMP, epoch ms
REC_QUEUE_ID: Final = 18  # QUEUEID
REC_QUEUE_OFFSET: Final = 19  # QUEUEOFFSET
# What a ConsumeQueue entry needs of the record's strings, found while its bytes are in cache (the kernel's
# hints; the numpy path leaves them unknown and the dispatch computes them from the bytes, as it does for
# any row the kernel could not settle):
REC_TAGS_CODE: Final = 20  # Java String.hashCode of the TAGS value (none: 0), or TAGS_CODE_UNKNOWN
REC_TOPIC_KEY: Final = 21  # REC_POS of the batch's first record with exactly this topic's bytes, or -1
REC_MULTI_DISPATCH: Final = 22  # 1: the properties hold "INNER_MULTI_DISPATCH\x01" (light queues), 0 not, -1 unknown
# Where REC_MULTI_DISPATCH is 1: the INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET values as
# string2messageProperties finds them (segment offset and length; -1, -1 where absent), so the dispatch
# parses the light queues' lists without gathering the properties again.
REC_MULTI_NAMES_POS: Final = 23
REC_MULTI_NAMES_LEN: Final = 24
REC_MULTI_OFFSETS_POS: Final = 25
REC_MULTI_OFFSETS_LEN: Final = 26
# Where the properties hold "INNER_NUM\x01" (a batch's inner messages): the INNER_NUM and INNER_BASE values
# (segment offset and length; -1, -1 where absent or not looked for), for the batch consume queues' units.
REC_INNER_NUM_POS: Final = 27
REC_INNER_NUM_LEN: Final = 28
REC_INNER_BASE_POS: Final = 29
REC_INNER_BASE_LEN: Final = 30
REC_COLS: Final = 31
TAGS_CODE_UNKNOWN: Final = 1 << 40  # outside int32: bytes that are not valid UTF-8, or not computed

# --- IndexFile ----------------------------------------------------------------------------------

INDEX_HEADER: Final = np.dtype([  # IndexHeader, 40 B
    ("begin_timestamp_ms", ">i8"),
    ("end_timestamp_ms", ">i8"),
    ("begin_phy_offset", ">i8"),
    ("end_phy_offset", ">i8"),
    ("hash_slot_count", ">i4"),
    ("index_count", ">i4"),
])
assert INDEX_HEADER.itemsize == 40

SLOT: Final = np.dtype(">i4")  # index of the newest item of the slot's chain; 0 = empty

INDEX_ITEM: Final = np.dtype([  # | key_hash 4 | phy_offset 8 | time_diff_s 4 | prev_index 4 | = 20 B
    ("key_hash", ">i4"),
    ("phy_offset", ">i8"),
    ("time_diff_s", ">i4"),
    ("prev_index", ">i4"),  # earlier item of the same slot; 0 ends the chain
])
assert INDEX_ITEM.itemsize == 20

INVALID_INDEX: Final = 0  # IndexFile.invalidIndex: slot value / prev index meaning "none"
FIRST_INDEX: Final = 1  # index_count of an empty file; item 0 is never written
MAX_TIME_DIFF_S: Final = 2**31 - 1  # Integer.MAX_VALUE cap of putKey

DEFAULT_HASH_SLOT_NUM: Final = 5_000_000  # MessageStoreConfig.maxHashSlotNum
DEFAULT_INDEX_NUM: Final = 20_000_000  # MessageStoreConfig.maxIndexNum
DEFAULT_MAX_MSGS_NUM_BATCH: Final = 64  # MessageStoreConfig.maxMsgsNumBatch

INDEX_FILE_NAME_FORMAT: Final = "%Y%m%d%H%M%S"  # + 3-digit millis: UtilAll.timeMillisToHumanString


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER.itemsize + SLOT.itemsize * hash_slot_num + INDEX_ITEM.itemsize * index_num


def slots_offset() -> int:
    return INDEX_HEADER.itemsize


def items_offset(hash_slot_num: int) -> int:
    return INDEX_HEADER.itemsize + SLOT.itemsize * hash_slot_num


# --- ConsumeQueue (store/consumequeue/<topic>/<queueId>/<20-digit fileFromOffset>) -----------------

CQ_UNIT: Final = np.dtype([  # ConsumeQueue.CQ_STORE_UNIT_SIZE = 20 B
    ("phy_offset", ">i8"),  # the record's stored PHYSICALOFFSET
    ("size", ">i4"),  # TOTALSIZE
    ("tags_code", ">i8"),
])
assert CQ_UNIT.itemsize == 20
CQ_BLANK: Final = (0, 0x7FFFFFFF, 0)  # fillPreBlank's entry: (0, Integer.MAX_VALUE, 0)
DEFAULT_CQ_FILE_SIZE: Final = 300_000 * CQ_UNIT.itemsize  # MessageStoreConfig.mappedFileSizeConsumeQueue
CQ_NAME_DIGITS: Final = 20  # UtilAll.offset2FileName
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
PROPERTY_DELAY: Final = "DELAY"  # MessageConst.PROPERTY_DELAY_TIME_LEVEL
PROPERTY_INNER_NUM: Final = "INNER_NUM"
PROPERTY_INNER_BASE: Final = "INNER_BASE"
# Light queues (LMQ): a message carrying both properties is also dispatched, after its own unit, as one unit
# per name into consumequeue/<name>/<queueId>/ at the offset the broker wrote for it (multiDispatchLmqQueue).
PROPERTY_INNER_MULTI_DISPATCH: Final = "INNER_MULTI_DISPATCH"  # MessageConst: the names, ","-separated
PROPERTY_INNER_MULTI_QUEUE_OFFSET: Final = "INNER_MULTI_QUEUE_OFFSET"  # the offsets, in the names' order
LMQ_PREFIX: Final = "%LMQ%"  # MixAll.LMQ_PREFIX: with enableLmq, such a name's queue id is 0
RETRY_TOPIC_PREFIX: Final = "%RETRY%"  # MixAll.RETRY_GROUP_TOPIC_PREFIX
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"  # TopicValidator.SYSTEM_TOPIC_PREFIX
DLQ_TOPIC_PREFIX: Final = "%DLQ%"  # MixAll.DLQ_GROUP_TOPIC_PREFIX
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC
BATCH_CQ: Final = "BatchCQ"  # the topic attribute queue.type of a topic whose queues are batchconsumequeue/
BATCH_CQ_DIR: Final = "batchconsumequeue"  # STORE/batchconsumequeue/<topic>/<queueId>/, and a build's OUT/
BATCH_CQ_UNIT_SIZE: Final = 46  # BatchConsumeQueue.CQ_STORE_UNIT_SIZE
DEFAULT_BATCH_CQ_FILE_SIZE: Final = 300_000 * BATCH_CQ_UNIT_SIZE  # MessageStoreConfig.mapperFileSizeBatchConsumeQueue
DEFAULT_DELAY_LEVELS: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # messageDelayLevel


def cq_file_size(configured: int) -> int:
    """``mappedFileSizeConsumeQueue`` as the broker uses it: rounded up to a multiple of 20."""
    unit = CQ_UNIT.itemsize
    return -(-configured // unit) * unit


# --- Store checkpoint (StoreCheckpoint), 4 KiB -------------------------------------------------

CHECKPOINT: Final = np.dtype([
    ("physic_msg_timestamp_ms", ">i8"),
    ("logics_msg_timestamp_ms", ">i8"),
    ("index_msg_timestamp_ms", ">i8"),
    ("master_flushed_offset", ">i8"),
    ("confirm_phy_offset", ">i8"),
    ("logics_physical_offset", ">i8"),  # 5.5.0 on (StoreCheckpoint.java:61); 0 in older brokers' files
])
CHECKPOINT_FILE_SIZE: Final = 4096
