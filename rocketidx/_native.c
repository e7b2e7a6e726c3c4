/*
 * rocketidx._native: the per-record loops of the core, compiled.
 *
 * Why this exists: pass 1 of the reader (follow TOTALSIZE from record to record) and the body CRC
 * are inherently one step per record; in Python they cost about 3 us a record, 10x the yardstick
 * (RocketMQ's own parse + putKey handles about 0.9 million messages/s). Everything else stays numpy.
 * rocketidx.messages / rocketidx.entries hold the same logic in numpy and are the reference; the
 * tests run both on every golden case and on fuzzed input and require equal results.
 *
 * scan(buf, seg_size, base, start, end, check_crc, out) walks records that start in [start, end),
 * checks each one as CommitLog.checkMessageAndReturnSize(checkCRC) does, and writes REC_COLS int64
 * per valid record into `out` (see REC_* below). It returns (n, stop_pos, stop_code, a, b).
 *
 * entries(buf, recs, n, row, phy, ts, seq, hash, slow, kpos, klen) makes IndexService.buildIndex's entries
 * for n records: skip rollbacks, topic#UNIQ_KEY, then topic#piece for every non-empty piece of KEYS
 * split on 0x20, hashing with Java's String.hashCode over UTF-16 units. An entry whose bytes are not
 * valid UTF-8 gets slow=1 and is re-hashed in Python (Java's U+FFFD replacement rules).
 *
 * scan_entries(...) does both in one pass while each record is still in cache (the build's path).
 *
 * light_units(...) and plain_longs(...) split light-queue lists and parse decimal longs where the values are
 * plain ASCII; anything else is left to the Python reference in rocketidx.commitlog.dispatch.
 */
#define _GNU_SOURCE  /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL_CRC 1
#endif

enum {
    REC_POS, REC_TOTAL, REC_V2, REC_SYSFLAG, REC_BODY_POS, REC_BODY_LEN, REC_TOPIC_POS, REC_TOPIC_LEN,
    REC_PROPS_POS, REC_PROPS_LEN, REC_KEYS_POS, REC_KEYS_LEN, REC_UNIQ_POS, REC_UNIQ_LEN, REC_TAGS_POS,
    REC_TAGS_LEN, REC_PHY, REC_STORE_TS, REC_QUEUE_ID, REC_QUEUE_OFFSET, REC_TAGS_CODE, REC_TOPIC_KEY,
    REC_MULTI_DISPATCH, REC_MULTI_NAMES_POS, REC_MULTI_NAMES_LEN, REC_MULTI_OFFSETS_POS, REC_MULTI_OFFSETS_LEN,
    REC_INNER_NUM_POS, REC_INNER_NUM_LEN, REC_INNER_BASE_POS, REC_INNER_BASE_LEN, REC_COLS
};
#define TAGS_CODE_UNKNOWN ((int64_t)1 << 40)

enum {
    STOP_RANGE_END = 0, STOP_SEGMENT_END = 1, STOP_END_OF_DATA = 2, STOP_BLANK = 3, STOP_BAD_MAGIC = 4,
    STOP_BAD_SIZE = 5, STOP_FIXED_OVERRUN = 6, STOP_BODY_OVERRUN = 7, STOP_TOPICLEN_OVERRUN = 8,
    STOP_TOPIC_OVERRUN = 9, STOP_CRC = 10, STOP_LENGTH = 11, STOP_TORN_HEADER = 12, STOP_CAPACITY = 13,
    STOP_JAVA_CHECK = 14
};

#define MAGIC_V1 0xDAA320A7u
#define MAGIC_V2 0xDAA320ABu
#define MAGIC_BLANK 0xCBD43194u
#define PREFIX 48
#define MIN_RECORD 91

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int all_zero(const unsigned char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* The body CRC (zlib's CRC-32) is a fifth of a build's time through zlib's table loop. Where the CPU has
 * carry-less multiply, 64-byte blocks are folded four lanes at a time instead and the last 128 bits reduced
 * to 32 with a Barrett step (Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ",
 * Intel 2009; the constants are x^k mod P for the reflected polynomial 0xEDB88320). The head shorter than
 * 64 bytes and the tail past the last 16-byte block go through zlib; tests compare the two on random
 * lengths and offsets (tests/unit/commitlog/test_native_crc.py). */
#ifdef HAVE_CLMUL_CRC
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(uint32_t crc, const unsigned char *p, size_t len) {
    /* len >= 64: returns the CRC-32 of crc continued over p[0 : len & ~15]; the caller does the rest. */
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x0 = _mm_loadu_si128((const __m128i *)p), x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32)), x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)~crc));
    p += 64;
    len -= 64;
#define FOLD(x, k, next) do { __m128i lo_ = _mm_clmulepi64_si128((x), (k), 0x00); \
        (x) = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128((x), (k), 0x11), lo_), (next)); } while (0)
    for (; len >= 64; p += 64, len -= 64) {
        FOLD(x0, k1k2, _mm_loadu_si128((const __m128i *)p));
        FOLD(x1, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
        FOLD(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
        FOLD(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    FOLD(x0, k3k4, x1);
    FOLD(x0, k3k4, x2);
    FOLD(x0, k3k4, x3);
    for (; len >= 16; p += 16, len -= 16)
        FOLD(x0, k3k4, _mm_loadu_si128((const __m128i *)p));
#undef FOLD
    /* 128 -> 64 bits, then 64 -> 32, then the Barrett reduction. */
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x0, k3k4, 0x10), _mm_srli_si128(x0, 8));
    x0 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00), _mm_srli_si128(x1, 4));
    x1 = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x0, mask32), poly, 0x10), mask32);
    x0 = _mm_xor_si128(x0, _mm_clmulepi64_si128(x1, poly, 0x00));
    return ~(uint32_t)_mm_extract_epi32(x0, 1);
}

static int have_clmul = -1;
#endif

/* zlib's crc32(0, p, len) (the value CommitLog's BODYCRC holds, before its 0x7FFFFFFF mask). */
static uint32_t body_crc(const unsigned char *p, size_t len) {
#ifdef HAVE_CLMUL_CRC
    if (have_clmul < 0)
        have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    if (have_clmul && len >= 64) {
        size_t head = len & ~(size_t)15;
        uint32_t crc = crc32_clmul(0, p, len);
        return head == len ? crc : (uint32_t)crc32(crc, p + head, (uInt)(len - head));
    }
#endif
    return (uint32_t)crc32(0L, p, (uInt)len);
}

/* Last non-empty value of property `name` (string2messageProperties: a later piece wins). */
static void find_property(const unsigned char *s, int64_t len, const char *name, int64_t nlen,
                          int64_t *vpos, int64_t *vlen) {
    int64_t i = 0;
    *vpos = -1;
    *vlen = -1;
    while (i < len) {
        const unsigned char *sep = memchr(s + i, 2, (size_t)(len - i));
        int64_t piece_end = sep ? (int64_t)(sep - s) : len;
        const unsigned char *kv = memchr(s + i, 1, (size_t)(piece_end - i));
        if (kv) {
            int64_t k = (int64_t)(kv - s);
            if (k > i && k < piece_end - 1 && k - i == nlen && memcmp(s + i, name, (size_t)nlen) == 0) {
                *vpos = k + 1;
                *vlen = piece_end - k - 1;
            }
        }
        i = piece_end + 1;
    }
}

/* find_property for KEYS, UNIQ_KEY and TAGS in one walk over the pieces (v: their value positions and lengths,
 * in that order, -1 where absent): every record needs all three. */
static void find_key_properties(const unsigned char *s, int64_t len, int64_t v[6]) {
    for (int j = 0; j < 6; j++) v[j] = -1;
    int64_t i = 0;
    while (i < len) {
        const unsigned char *sep = memchr(s + i, 2, (size_t)(len - i));
        int64_t piece_end = sep ? (int64_t)(sep - s) : len;
        const unsigned char *kv = memchr(s + i, 1, (size_t)(piece_end - i));
        if (kv) {
            int64_t k = (int64_t)(kv - s), nlen = k - i;
            if (nlen > 0 && k < piece_end - 1) {
                int which = -1;
                if (nlen == 4 && memcmp(s + i, "KEYS", 4) == 0) which = 0;
                else if (nlen == 8 && memcmp(s + i, "UNIQ_KEY", 8) == 0) which = 2;
                else if (nlen == 4 && memcmp(s + i, "TAGS", 4) == 0) which = 4;
                if (which >= 0) { v[which] = k + 1; v[which + 1] = piece_end - k - 1; }
            }
        }
        i = piece_end + 1;
    }
}

/* Whether s[0:len] is an ASCII [+-]?[0-9]+ within [lo, hi]: what Java's parse methods surely accept. */
static int plain_integer(const unsigned char *s, int64_t len, int64_t lo, int64_t hi) {
    int64_t i = 0, neg = 0;
    if (len > 0 && (s[0] == '+' || s[0] == '-')) { neg = s[0] == '-'; i = 1; }
    if (i >= len || len - i > 19) return 0;
    uint64_t v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (neg) return v <= (uint64_t)(-(lo + 1)) + 1;
    return v <= (uint64_t)hi;
}

/* The two parses of checkMessageAndReturnSize that can throw on a well-formed record: DELAY on
 * SCHEDULE_TOPIC_XXXX (Integer.parseInt) and, with both present, INNER_BASE (Long.parseLong) and
 * INNER_NUM (Short.parseShort). A value these surely accept passes here; any other (a bad one, or Unicode
 * digits Java accepts) is judged by the Python reference, so the rule lives in one place. */
static int needs_java_check(const unsigned char *r, int64_t topic_pos, int64_t topic_len, int64_t props_pos,
                            int64_t props_len, int has_inner) {
    const unsigned char *ps = r + props_pos;
    int64_t vp, vl, bp, bl;
    if (topic_len == 19 && memcmp(r + topic_pos, "SCHEDULE_TOPIC_XXXX", 19) == 0) {
        find_property(ps, props_len, "DELAY", 5, &vp, &vl);
        if (vp >= 0 && !plain_integer(ps + vp, vl, INT32_MIN, INT32_MAX)) return 1;
    }
    if (props_len >= 11 && has_inner) {
        find_property(ps, props_len, "INNER_NUM", 9, &vp, &vl);
        find_property(ps, props_len, "INNER_BASE", 10, &bp, &bl);
        if (vp >= 0 && bp >= 0 && !(plain_integer(ps + bp, bl, INT64_MIN, INT64_MAX)
                                     && plain_integer(ps + vp, vl, -32768, 32767)))
            return 1;
    }
    return 0;
}

static inline int hash_utf8(const unsigned char *s, int64_t len, uint32_t *h);

/* REC_TOPIC_KEY: a batch holds few topics, so the first record of each (compared byte for byte; FNV-1a only
 * picks the slot) names the group; past TOPIC_SLOTS / 2 distinct topics the rest stay -1 (Python groups them). */
#define TOPIC_SLOTS 4096
typedef struct { int64_t row[TOPIC_SLOTS]; int used; } topic_table;

static void topic_table_init(topic_table *t) {
    for (int j = 0; j < TOPIC_SLOTS; j++) t->row[j] = -1;
    t->used = 0;
}

static void topic_key(const unsigned char *b, int64_t *recs, Py_ssize_t i, topic_table *t) {
    int64_t *r = recs + i * REC_COLS;
    const unsigned char *s = b + r[REC_TOPIC_POS];
    int64_t len = r[REC_TOPIC_LEN] > 0 ? r[REC_TOPIC_LEN] : 0;
    uint32_t h = 2166136261u;
    for (int64_t k = 0; k < len; k++) h = (h ^ s[k]) * 16777619u;
    uint32_t slot = h & (TOPIC_SLOTS - 1);
    while (t->row[slot] >= 0) {
        const int64_t *q = recs + t->row[slot] * REC_COLS;
        int64_t qlen = q[REC_TOPIC_LEN] > 0 ? q[REC_TOPIC_LEN] : 0;
        if (qlen == len && memcmp(b + q[REC_TOPIC_POS], s, (size_t)len) == 0) { r[REC_TOPIC_KEY] = q[REC_POS]; return; }
        slot = (slot + 1) & (TOPIC_SLOTS - 1);
    }
    if (t->used < TOPIC_SLOTS / 2) {
        t->row[slot] = i;
        t->used++;
        r[REC_TOPIC_KEY] = r[REC_POS];
    }
}

/* Check the record at p as CommitLog.checkMessageAndReturnSize(checkCRC) does and fill its row.
 * Returns 0 for a valid message record, else a STOP_* code with details in *a, *b. */
static int check_record(const unsigned char *b, Py_ssize_t seg_size, Py_ssize_t p, int check_crc,
                        int64_t *row, long long *a, long long *bb) {
    Py_ssize_t left = seg_size - p;
    if (left < 8) {
        if (left >= 4 && be32(b + p) == 0) { *a = all_zero(b + p, left); return STOP_END_OF_DATA; }
        if (all_zero(b + p, left)) { *a = 1; return STOP_END_OF_DATA; }
        *a = left;
        return STOP_TORN_HEADER;
    }
    int32_t total = (int32_t)be32(b + p);
    uint32_t magic = be32(b + p + 4);
    /* a = -1: whether the tail is all zero is left to the caller, which can skip holes and release
       pages as it goes (reading a 1 GiB zero tail here would map all of it). */
    if (total == 0) { *a = -1; return STOP_END_OF_DATA; }
    if (magic == MAGIC_BLANK) return STOP_BLANK;
    if (magic != MAGIC_V1 && magic != MAGIC_V2) { *a = magic; return STOP_BAD_MAGIC; }
    if (total < MIN_RECORD || total > left) { *a = total; return STOP_BAD_SIZE; }
    const unsigned char *r = b + p;
    int64_t rec_end = total;
    int v2 = magic == MAGIC_V2;
    int32_t sys_flag = (int32_t)be32(r + 36);
    int64_t born_w = (sys_flag & 0x10) ? 20 : 8, store_w = (sys_flag & 0x20) ? 20 : 8;
    int64_t body_len_at = PREFIX + born_w + 8 + store_w + 12;
    int64_t body_pos = body_len_at + 4;
    if (body_pos > rec_end) { *a = total; return STOP_FIXED_OVERRUN; }
    int32_t body_len = (int32_t)be32(r + body_len_at);
    if (body_len < 0 || body_pos + body_len > rec_end) { *a = total; *bb = body_len; return STOP_BODY_OVERRUN; }
    int64_t tl_pos = body_pos + body_len, tl_bytes = v2 ? 2 : 1;
    int64_t topic_len = -1;
    int length_ok = tl_pos + tl_bytes <= rec_end;
    if (length_ok)
        topic_len = v2 ? (int64_t)(int16_t)((r[tl_pos] << 8) | r[tl_pos + 1]) : (int64_t)(int8_t)r[tl_pos];
    int64_t topic_pos = tl_pos + tl_bytes;
    int64_t props_len = 0, props_pos = 0, computed = 0;
    int have_computed = 0;
    int stop_after_crc = 0;
    if (!length_ok) stop_after_crc = STOP_TOPICLEN_OVERRUN;
    else if (topic_len < 0 || topic_pos + topic_len + 2 > rec_end) stop_after_crc = STOP_TOPIC_OVERRUN;
    else {
        int64_t pl_pos = topic_pos + topic_len;
        props_len = (int16_t)((r[pl_pos] << 8) | r[pl_pos + 1]);
        props_pos = pl_pos + 2;
        computed = props_pos + props_len;
        have_computed = 1;
        if (computed != rec_end) stop_after_crc = STOP_LENGTH;
    }
    /* The broker checks the body CRC before it reads the topic, so a torn body reports a CRC mismatch. */
    if (check_crc && body_len > 0) {
        uint32_t crc = body_crc(r + body_pos, (size_t)body_len) & 0x7FFFFFFFu;
        int32_t stored = (int32_t)be32(r + 8);
        if ((int64_t)crc != (int64_t)stored) { *a = stored; *bb = crc; return STOP_CRC; }
    }
    if (stop_after_crc) {
        *a = total;
        *bb = have_computed ? computed : body_len;
        return stop_after_crc;
    }
    row[REC_POS] = p;
    row[REC_TOTAL] = total;
    row[REC_V2] = v2;
    row[REC_SYSFLAG] = sys_flag;
    row[REC_BODY_POS] = p + body_pos;
    row[REC_BODY_LEN] = body_len;
    row[REC_TOPIC_POS] = p + topic_pos;
    row[REC_TOPIC_LEN] = topic_len;
    row[REC_PROPS_POS] = p + props_pos;
    row[REC_PROPS_LEN] = props_len;
    int64_t v[6], vp, vl;
    find_key_properties(r + props_pos, props_len, v);
    row[REC_KEYS_POS] = v[0] < 0 ? 0 : p + props_pos + v[0];
    row[REC_KEYS_LEN] = v[1];
    row[REC_UNIQ_POS] = v[2] < 0 ? 0 : p + props_pos + v[2];
    row[REC_UNIQ_LEN] = v[3];
    row[REC_TAGS_POS] = v[4] < 0 ? 0 : p + props_pos + v[4];
    row[REC_TAGS_LEN] = vl = v[5];
    vp = v[4];
    row[REC_PHY] = (int64_t)(((uint64_t)be32(r + 28) << 32) | be32(r + 32));
    row[REC_STORE_TS] = (int64_t)(((uint64_t)be32(r + PREFIX + born_w) << 32) | be32(r + PREFIX + born_w + 4));
    row[REC_QUEUE_ID] = (int32_t)be32(r + 12);
    row[REC_QUEUE_OFFSET] = (int64_t)(((uint64_t)be32(r + 20) << 32) | be32(r + 24));
    uint32_t tags_code = 0;
    row[REC_TAGS_CODE] = vl <= 0 || hash_utf8(r + props_pos + vp, vl, &tags_code) ? (int64_t)(int32_t)tags_code
                                                                                   : TAGS_CODE_UNKNOWN;
    row[REC_TOPIC_KEY] = -1;
    /* Light queues: whether the properties name any (the dispatch parses only such records). */
    /* Every property name looked for below starts with INNER_: one search for it spares most records the rest,
       and the others search on from where it first occurs. */
    const unsigned char *props_end = r + props_pos + props_len;
    const unsigned char *inner = props_len >= 6 ? memmem(r + props_pos, (size_t)props_len, "INNER_", 6) : NULL;
    row[REC_MULTI_DISPATCH] = inner && props_len >= 21 &&
        memmem(inner, (size_t)(props_end - inner), "INNER_MULTI_DISPATCH\x01", 21) != NULL;
    row[REC_MULTI_NAMES_POS] = row[REC_MULTI_NAMES_LEN] = row[REC_MULTI_OFFSETS_POS] = row[REC_MULTI_OFFSETS_LEN] = -1;
    if (row[REC_MULTI_DISPATCH]) {  /* the two lists' values, found while the record is in cache */
        find_property(r + props_pos, props_len, "INNER_MULTI_DISPATCH", 20, &vp, &vl);
        if (vp >= 0) { row[REC_MULTI_NAMES_POS] = p + props_pos + vp; row[REC_MULTI_NAMES_LEN] = vl; }
        find_property(r + props_pos, props_len, "INNER_MULTI_QUEUE_OFFSET", 24, &vp, &vl);
        if (vp >= 0) { row[REC_MULTI_OFFSETS_POS] = p + props_pos + vp; row[REC_MULTI_OFFSETS_LEN] = vl; }
    }
    /* A batch's inner messages (BatchCQ units take their size and base): both values, where the first is. */
    row[REC_INNER_NUM_POS] = row[REC_INNER_NUM_LEN] = row[REC_INNER_BASE_POS] = row[REC_INNER_BASE_LEN] = -1;
    if (inner && props_len >= 10 && memmem(inner, (size_t)(props_end - inner), "INNER_NUM\x01", 10) != NULL) {
        find_property(r + props_pos, props_len, "INNER_NUM", 9, &vp, &vl);
        if (vp >= 0) { row[REC_INNER_NUM_POS] = p + props_pos + vp; row[REC_INNER_NUM_LEN] = vl; }
        find_property(r + props_pos, props_len, "INNER_BASE", 10, &vp, &vl);
        if (vp >= 0) { row[REC_INNER_BASE_POS] = p + props_pos + vp; row[REC_INNER_BASE_LEN] = vl; }
    }
    if (needs_java_check(r, topic_pos, topic_len, props_pos, props_len, inner != NULL)) return STOP_JAVA_CHECK;
    return 0;
}

/* Records a few ahead, fetched while this one is worked on. A record is read at its head (sizes, fields) and its
 * tail (topic, properties), far apart, with nothing between read unless the CRC is checked: each is a cache miss
 * the hardware's stream prefetcher does not foresee, and the tail's was most of a scan's time. A second walk of
 * the same chain of sizes runs PREFETCH_AHEAD records in front of the scan: at each step it reads the head of its
 * record (fetched a step ago) and fetches that record's tail and the next head. It stops at a size that is not a
 * record's (returns -1) and never reads past the segment; the scan judges every record itself. */
#define PREFETCH_AHEAD 4

static inline Py_ssize_t prefetch_next(const unsigned char *b, Py_ssize_t seg_size, Py_ssize_t p) {
    if (p < 0 || p + 8 > seg_size) return -1;
    int32_t total = (int32_t)be32(b + p);
    if (total < MIN_RECORD || total > seg_size - p) return -1;
    const unsigned char *r = b + p;
    __builtin_prefetch(r + 64);
    for (int64_t off = total - 1; off >= 128 && off >= (int64_t)total - 320; off -= 64) __builtin_prefetch(r + off);
    __builtin_prefetch(r + total);
    return p + total;
}

static inline Py_ssize_t prefetch_start(const unsigned char *b, Py_ssize_t seg_size, Py_ssize_t p) {
    for (int k = 0; k < PREFETCH_AHEAD && p >= 0; k++) p = prefetch_next(b, seg_size, p);
    return p;
}

static PyObject *native_scan(PyObject *self, PyObject *args) {
    Py_buffer buf, out;
    Py_ssize_t seg_size, start, end;
    long long base;
    int check_crc;
    if (!PyArg_ParseTuple(args, "y*nLnnpw*", &buf, &seg_size, &base, &start, &end, &check_crc, &out))
        return NULL;
    const unsigned char *b = (const unsigned char *)buf.buf;
    int64_t *o = (int64_t *)out.buf;
    Py_ssize_t cap = out.len / (Py_ssize_t)(sizeof(int64_t) * REC_COLS);
    if (buf.len < seg_size) seg_size = buf.len;
    Py_ssize_t n = 0, p = start;
    int code;
    long long a = 0, bb = 0;
    topic_table topics;

    Py_BEGIN_ALLOW_THREADS
    topic_table_init(&topics);
    Py_ssize_t ahead = prefetch_start(b, seg_size, p);
    for (;;) {
        if (p >= end) { code = p >= seg_size ? STOP_SEGMENT_END : STOP_RANGE_END; break; }
        if (n >= cap) { code = STOP_CAPACITY; break; }
        code = check_record(b, seg_size, p, check_crc, o + n * REC_COLS, &a, &bb);
        if (code) break;
        p += o[n * REC_COLS + REC_TOTAL];
        ahead = prefetch_next(b, seg_size, ahead);
        topic_key(b, o, n, &topics);
        n++;
    }
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    return Py_BuildValue("nniLL", n, p, code, a, bb);
}

/* Continue Java's String.hashCode over UTF-8 bytes; returns 0 on malformed input (caller re-hashes). */
static inline int hash_utf8(const unsigned char *s, int64_t len, uint32_t *h) {
    uint32_t x = *h;
    int64_t i = 0;
    while (i < len) {
        /* Four ASCII bytes per step: h*31^4 + c0*31^3 + c1*31^2 + c2*31 + c3 halves the dependent chain. */
        if (i + 4 <= len) {
            uint32_t w;
            memcpy(&w, s + i, 4);
            if ((w & 0x80808080u) == 0) {
                x = x * 923521u + (uint32_t)s[i] * 29791u + (uint32_t)s[i + 1] * 961u + (uint32_t)s[i + 2] * 31u
                    + (uint32_t)s[i + 3];
                i += 4;
                continue;
            }
        }
        uint32_t c = s[i];
        if (c < 0x80) { x = 31u * x + c; i++; continue; }
        uint32_t cp;
        int k;
        if (c >= 0xC2 && c <= 0xDF) { cp = c & 0x1F; k = 1; }
        else if (c >= 0xE0 && c <= 0xEF) { cp = c & 0x0F; k = 2; }
        else if (c >= 0xF0 && c <= 0xF4) { cp = c & 0x07; k = 3; }
        else return 0;
        for (int j = 1; j <= k; j++) {
            if (i + j >= len) return 0;
            uint32_t cc = s[i + j];
            if ((cc & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (cc & 0x3F);
        }
        /* Overlong 3/4-byte forms, surrogates and > U+10FFFF are malformed for Java's decoder too. */
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000;
            x = 31u * x + (0xD800u + (v >> 10));
            x = 31u * x + (0xDC00u + (v & 0x3FF));
        } else {
            x = 31u * x + cp;
        }
        i += k + 1;
    }
    *h = x;
    return 1;
}

typedef struct {
    int64_t *row, *phy, *ts, *kpos, *klen;
    int32_t *seq, *hash;
    uint8_t *slow;
    Py_ssize_t cap, m;
} entry_out;

/* The most entries a record can make: UNIQ_KEY plus one per non-empty space-separated KEYS piece. */
static inline Py_ssize_t max_entries(const int64_t *r) {
    int64_t kl = r[REC_KEYS_LEN] > 0 ? r[REC_KEYS_LEN] : 0;
    return 1 + (Py_ssize_t)((kl + 1) / 2);
}

static inline void put_entry(entry_out *o, const int64_t *r, Py_ssize_t i, int32_t seq, uint32_t h, int ok,
                             int64_t kpos, int64_t klen) {
    Py_ssize_t m = o->m++;
    o->row[m] = i; o->seq[m] = seq; o->hash[m] = (int32_t)h; o->slow[m] = !ok;
    o->phy[m] = r[REC_PHY]; o->ts[m] = r[REC_STORE_TS]; o->kpos[m] = kpos; o->klen[m] = klen;
}

/* IndexService.buildIndex for one record; the caller made sure max_entries(r) fit. */
static void emit_entries(const unsigned char *b, const int64_t *r, Py_ssize_t i, entry_out *o) {
    if ((r[REC_SYSFLAG] & 0xC) == 0xC) return; /* transaction rollback: no entry */
    uint32_t ht = 0;
    int topic_ok = hash_utf8(b + r[REC_TOPIC_POS], r[REC_TOPIC_LEN], &ht);
    ht = 31u * ht + '#';
    int32_t seq = 0;
    if (r[REC_UNIQ_LEN] > 0) {
        uint32_t h = ht;
        int ok = topic_ok && hash_utf8(b + r[REC_UNIQ_POS], r[REC_UNIQ_LEN], &h);
        put_entry(o, r, i, seq++, h, ok, r[REC_UNIQ_POS], r[REC_UNIQ_LEN]);
    }
    if (r[REC_KEYS_LEN] > 0) {
        const unsigned char *k = b + r[REC_KEYS_POS];
        int64_t len = r[REC_KEYS_LEN], s = 0;
        while (s <= len) {
            const unsigned char *sp = s < len ? memchr(k + s, ' ', (size_t)(len - s)) : NULL;
            int64_t e = sp ? (int64_t)(sp - k) : len;
            if (e > s) {
                uint32_t h = ht;
                int ok = topic_ok && hash_utf8(k + s, e - s, &h);
                put_entry(o, r, i, seq++, h, ok, r[REC_KEYS_POS] + s, e - s);
            }
            s = e + 1;
        }
    }
}

#define ENTRY_BUFFERS(o, bufs) do { \
    (o).row = (int64_t *)(bufs)[0].buf; (o).phy = (int64_t *)(bufs)[1].buf; (o).ts = (int64_t *)(bufs)[2].buf; \
    (o).seq = (int32_t *)(bufs)[3].buf; (o).hash = (int32_t *)(bufs)[4].buf; (o).slow = (uint8_t *)(bufs)[5].buf; \
    (o).kpos = (int64_t *)(bufs)[6].buf; (o).klen = (int64_t *)(bufs)[7].buf; \
    (o).cap = (bufs)[0].len / (Py_ssize_t)sizeof(int64_t); (o).m = 0; } while (0)

static PyObject *native_entries(PyObject *self, PyObject *args) {
    Py_buffer buf, recs, e[8];
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*y*nw*w*w*w*w*w*w*w*", &buf, &recs, &n, &e[0], &e[1], &e[2], &e[3], &e[4],
                          &e[5], &e[6], &e[7]))
        return NULL;
    const unsigned char *b = (const unsigned char *)buf.buf;
    const int64_t *R = (const int64_t *)recs.buf;
    entry_out o;
    ENTRY_BUFFERS(o, e);
    int overflow = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *r = R + i * REC_COLS;
        if (o.m + max_entries(r) > o.cap) { overflow = 1; break; }
        emit_entries(b, r, i, &o);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&recs);
    for (int j = 0; j < 8; j++) PyBuffer_Release(&e[j]);
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "entries: output capacity too small");
        return NULL;
    }
    return PyLong_FromSsize_t(o.m);
}

/* scan and entries in one pass, while each record is still in cache. Stops with STOP_CAPACITY when the
 * records or the entry buffers are full; returns (n, m, stop_pos, stop_code, a, b). */
static PyObject *native_scan_entries(PyObject *self, PyObject *args) {
    Py_buffer buf, out, e[8];
    Py_ssize_t seg_size, start, end;
    long long base;
    int check_crc;
    if (!PyArg_ParseTuple(args, "y*nLnnpw*w*w*w*w*w*w*w*w*", &buf, &seg_size, &base, &start, &end, &check_crc,
                          &out, &e[0], &e[1], &e[2], &e[3], &e[4], &e[5], &e[6], &e[7]))
        return NULL;
    const unsigned char *b = (const unsigned char *)buf.buf;
    int64_t *recs = (int64_t *)out.buf;
    Py_ssize_t cap = out.len / (Py_ssize_t)(sizeof(int64_t) * REC_COLS);
    if (buf.len < seg_size) seg_size = buf.len;
    entry_out o;
    ENTRY_BUFFERS(o, e);
    Py_ssize_t n = 0, p = start;
    int code;
    long long a = 0, bb = 0;
    topic_table topics;
    Py_BEGIN_ALLOW_THREADS
    topic_table_init(&topics);
    Py_ssize_t ahead = prefetch_start(b, seg_size, p);
    for (;;) {
        if (p >= end) { code = p >= seg_size ? STOP_SEGMENT_END : STOP_RANGE_END; break; }
        if (n >= cap) { code = STOP_CAPACITY; break; }
        int64_t *r = recs + n * REC_COLS;
        code = check_record(b, seg_size, p, check_crc, r, &a, &bb);
        if (code) break;
        if (o.m + max_entries(r) > o.cap) { code = STOP_CAPACITY; break; }
        ahead = prefetch_next(b, seg_size, ahead);
        topic_key(b, recs, n, &topics);
        emit_entries(b, r, n, &o);
        p += r[REC_TOTAL];
        n++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    for (int j = 0; j < 8; j++) PyBuffer_Release(&e[j]);
    return Py_BuildValue("nnniLL", n, o.m, p, code, a, bb);
}

/* light_units(buf, names_pos, names_len, offs_pos, offs_len, count, simple, unit_name, unit_offset, name_pos,
 * name_len) -> (units, names): the light-queue units of n records whose two lists (INNER_MULTI_DISPATCH,
 * INNER_MULTI_QUEUE_OFFSET) sit at the given ranges of buf, for the plain case only. A record is plain when both
 * values are printable ASCII without blanks (0x21-0x7E), neither has an empty item before its trailing commas
 * (which Java's split drops), and every offset is -?[0-9]{1,18} (what Long.parseLong surely takes). For a plain
 * record, count = its units (0 when the lists' lengths differ: the broker dispatches none), each unit's name as an
 * id into the distinct names (first seen at name_pos/name_len) and its offset; simple = 0 leaves the record to
 * the Python reference (rocketidx.commitlog.dispatch), which knows the rest of Java's rules. */
typedef struct { int64_t *id; uint32_t *hash; Py_ssize_t cap, used; } name_table;

/* The items of a list as Java's split(",") makes them, when it is plain (see above): their count in *items. With
 * digits, each item must also be -?[0-9]{1,18}. */
static int split_plain(const unsigned char *s, int64_t len, int64_t *items, int digits) {
    int64_t e = len;
    while (e > 0 && s[e - 1] == ',') e--;
    int64_t n = 1, item = 0, minus = 0;
    for (int64_t i = 0; i < e; i++) {
        unsigned char c = s[i];
        if (c == ',') {
            if (item == minus) return 0;  /* empty, or a lone '-' */
            n++;
            item = minus = 0;
            continue;
        }
        if (c < 0x21 || c > 0x7E) return 0;
        if (digits) {
            if (c == '-' && item == 0) minus = 1;
            else if (c < '0' || c > '9' || item - minus >= 18) return 0;
        }
        item++;
    }
    if (item == minus) return 0;
    *items = n;
    return 1;
}

static int64_t parse_plain_long(const unsigned char *s, int64_t len) {
    int64_t i = s[0] == '-', x = 0;
    for (int64_t k = i; k < len; k++) x = x * 10 + (s[k] - '0');
    return i ? -x : x;
}

static int name_grow(name_table *t) {
    Py_ssize_t cap = t->cap ? t->cap * 2 : 1024;
    int64_t *id = malloc(sizeof(int64_t) * (size_t)cap);
    uint32_t *hash = malloc(sizeof(uint32_t) * (size_t)cap);
    if (!id || !hash) { free(id); free(hash); return 0; }
    for (Py_ssize_t j = 0; j < cap; j++) id[j] = -1;
    for (Py_ssize_t j = 0; j < t->cap; j++) {
        if (t->id[j] < 0) continue;
        Py_ssize_t slot = t->hash[j] & (cap - 1);
        while (id[slot] >= 0) slot = (slot + 1) & (cap - 1);
        id[slot] = t->id[j];
        hash[slot] = t->hash[j];
    }
    free(t->id);
    free(t->hash);
    t->id = id;
    t->hash = hash;
    t->cap = cap;
    return 1;
}

static PyObject *native_light_units(PyObject *self, PyObject *args) {
    Py_buffer buf, in[4], out[6];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*w*w*w*w*", &buf, &in[0], &in[1], &in[2], &in[3], &out[0], &out[1],
                          &out[2], &out[3], &out[4], &out[5]))
        return NULL;
    const unsigned char *b = (const unsigned char *)buf.buf;
    const int64_t *npos = in[0].buf, *nlen = in[1].buf, *opos = in[2].buf, *olen = in[3].buf;
    int64_t *count = out[0].buf, *unit_name = out[2].buf, *unit_offset = out[3].buf;
    int64_t *fpos = out[4].buf, *flen = out[5].buf;
    uint8_t *simple = out[1].buf;
    Py_ssize_t n = in[0].len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t ucap = out[2].len / (Py_ssize_t)sizeof(int64_t), fcap = out[4].len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t units = 0;
    name_table t = {NULL, NULL, 0, 0};
    int failed = 0;  /* 1: out of memory, 2: output too small */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        const unsigned char *ns = b + npos[i], *os = b + opos[i];
        int64_t nn = 0, no = 0;
        count[i] = 0;
        simple[i] = nlen[i] > 0 && olen[i] > 0 && split_plain(ns, nlen[i], &nn, 0) && split_plain(os, olen[i], &no, 1);
        if (!simple[i] || nn != no) continue;
        if (units + nn > ucap) { failed = 2; break; }
        int64_t a = 0, c = 0;  /* the current name item starts at a, the offset item at c */
        for (int64_t k = 0; k < nn; k++) {
            int64_t ae = a, ce = c;
            while (ae < nlen[i] && ns[ae] != ',') ae++;
            while (ce < olen[i] && os[ce] != ',') ce++;
            unit_offset[units + k] = parse_plain_long(os + c, ce - c);
            uint32_t h = 2166136261u;
            for (int64_t j = a; j < ae; j++) h = (h ^ ns[j]) * 16777619u;
            if ((t.used + 1) * 2 > t.cap && !name_grow(&t)) { failed = 1; break; }
            Py_ssize_t slot = h & (t.cap - 1);
            int64_t id = -1;
            while (t.id[slot] >= 0) {
                int64_t q = t.id[slot];
                if (t.hash[slot] == h && flen[q] == ae - a && memcmp(b + fpos[q], ns + a, (size_t)(ae - a)) == 0) {
                    id = q;
                    break;
                }
                slot = (slot + 1) & (t.cap - 1);
            }
            if (id < 0) {
                if (t.used >= fcap) { failed = 2; break; }
                id = t.used++;
                fpos[id] = npos[i] + a;
                flen[id] = ae - a;
                t.id[slot] = id;
                t.hash[slot] = h;
            }
            unit_name[units + k] = id;
            a = ae + 1;
            c = ce + 1;
        }
        if (!failed) {
            count[i] = nn;
            units += nn;
        }
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t names = t.used;
    free(t.id);
    free(t.hash);
    PyBuffer_Release(&buf);
    for (int j = 0; j < 4; j++) PyBuffer_Release(&in[j]);
    for (int j = 0; j < 6; j++) PyBuffer_Release(&out[j]);
    if (failed == 1) return PyErr_NoMemory();
    if (failed == 2) {
        PyErr_SetString(PyExc_ValueError, "light_units: output capacity too small");
        return NULL;
    }
    return Py_BuildValue("nn", units, names);
}

/* plain_longs(buf, pos, len, value, ok): each range of buf as Long.parseLong reads it, where it is [+-]?[0-9]{1,18}
 * (ok = 1); any other text (ok = 0) is left to the Python reference (rocketidx.commitlog.dispatch.java_parse_longs). */
static PyObject *native_plain_longs(PyObject *self, PyObject *args) {
    Py_buffer buf, pos, len, value, ok;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*", &buf, &pos, &len, &value, &ok))
        return NULL;
    const unsigned char *b = (const unsigned char *)buf.buf;
    const int64_t *P = pos.buf, *N = len.buf;
    int64_t *V = value.buf;
    uint8_t *K = ok.buf;
    Py_ssize_t n = pos.len / (Py_ssize_t)sizeof(int64_t);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *s = b + P[i];
        int64_t l = N[i], k = l > 0 && (s[0] == '-' || s[0] == '+'), x = 0;
        int good = l - k >= 1 && l - k <= 18;
        for (int64_t j = k; good && j < l; j++) {
            if (s[j] < '0' || s[j] > '9') good = 0;
            else x = x * 10 + (s[j] - '0');
        }
        V[i] = good ? (k && s[0] == '-' ? -x : x) : 0;
        K[i] = (uint8_t)good;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&pos);
    PyBuffer_Release(&len);
    PyBuffer_Release(&value);
    PyBuffer_Release(&ok);
    Py_RETURN_NONE;
}

/* index_put(slots, slot, first, prev) -> new_slots: IndexFile.putKey's chain for n entries whose slots are given,
 * the first of them getting item index `first`: each entry's prev is the slot's value (0 where that is 0 or above the
 * item count, as putKey treats it), and the slot then holds the entry's index. `slots` is the file's table in its
 * byte order (big-endian int32). Returns how many entries found their slot empty (the header's hashSlotCount).
 * One step per entry with random access to the table: the numpy version sorts the batch by slot instead. */
static PyObject *native_index_put(PyObject *self, PyObject *args) {
    Py_buffer slots, slot, prev;
    long long first;
    if (!PyArg_ParseTuple(args, "w*y*Lw*", &slots, &slot, &first, &prev))
        return NULL;
    unsigned char *S = (unsigned char *)slots.buf;
    Py_ssize_t n_slots = slots.len / 4, n = slot.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *K = slot.buf;
    int64_t *P = prev.buf;
    long long empty = 0;
    Py_ssize_t bad = -1;
    if (prev.len / (Py_ssize_t)sizeof(int64_t) < n) n = prev.len / (Py_ssize_t)sizeof(int64_t);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = K[i];
        if (s < 0 || s >= n_slots) { bad = i; break; }
        unsigned char *at = S + 4 * s;
        int64_t v = (int32_t)be32(at), index = first + i;
        if (v <= 0 || v > index) { v = 0; empty++; }
        P[i] = v;
        at[0] = (unsigned char)(index >> 24); at[1] = (unsigned char)(index >> 16);
        at[2] = (unsigned char)(index >> 8); at[3] = (unsigned char)index;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&slots);
    PyBuffer_Release(&slot);
    PyBuffer_Release(&prev);
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "index_put: entry %zd has no slot", bad);
        return NULL;
    }
    return PyLong_FromLongLong(empty);
}

/* crc32(buffer) -> zlib's CRC-32 of it, the way scan checks bodies (for tests of the folded path). */
static PyObject *native_crc32(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf))
        return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = body_crc((const unsigned char *)buf.buf, (size_t)buf.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"scan", native_scan, METH_VARARGS, "Walk and check CommitLog records; see the module comment."},
    {"entries", native_entries, METH_VARARGS, "Index entries and Java key hashes of scanned records."},
    {"scan_entries", native_scan_entries, METH_VARARGS, "scan and entries fused, one pass over the bytes."},
    {"light_units", native_light_units, METH_VARARGS, "Light-queue units of records with plain lists."},
    {"plain_longs", native_plain_longs, METH_VARARGS, "Plain decimal longs at ranges of a buffer."},
    {"index_put", native_index_put, METH_VARARGS, "IndexFile.putKey's slot chains for a batch of entries."},
    {"crc32", native_crc32, METH_VARARGS, "zlib's CRC-32 of a buffer, as scan checks bodies."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m) PyModule_AddIntConstant(m, "REC_COLS", REC_COLS);
    return m;
}
