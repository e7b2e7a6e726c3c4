"""Small numpy <-> Arrow helpers shared by the reader, the key hash and property parsing.

In: numpy byte buffers and (position, length) ranges, or Arrow string/binary arrays.
Out: gathered byte ranges and zero-copy Arrow arrays over them.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def arrow(values: np.ndarray) -> pa.Array:
    """A 1-d numpy array of numbers or booleans as an Arrow array, without ``pa.array``.

    Why: ``pa.array`` asks pyarrow's pandas shim whether its argument is a pandas Series, and the first such
    question imports pandas (and ``pyarrow.compute`` with it) where pandas is installed: 0.2 to 0.4 s in every
    process that builds, each pool worker included. Numbers are wrapped zero-copy (the array keeps ``values``
    alive, as ``pa.array`` keeps it); booleans are packed into Arrow's bitmap. The type is the array's dtype's.
    """
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(np.packbits(values,
                                                                                               bitorder="little"))])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def numpy_of(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An Arrow array of numbers or booleans as numpy, without ``to_numpy`` (which imports pandas the first time,
    see :func:`arrow`): numbers without nulls are a zero-copy, read-only view; anything else goes through
    ``to_numpy``."""
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks != 1:
            return np.concatenate([numpy_of(c) for c in values.chunks]) if values.num_chunks else \
                np.zeros(0, np.dtype(values.type.to_pandas_dtype()))
        values = values.chunk(0)
    t = values.type
    if values.null_count or not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        return values.to_numpy(zero_copy_only=False)
    data = values.buffers()[1]
    if pa.types.is_boolean(t):
        bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
        return bits[values.offset:values.offset + len(values)].astype(bool)
    dtype = np.dtype(t.to_pandas_dtype())
    return np.frombuffer(data, dtype, count=len(values), offset=values.offset * dtype.itemsize)


def table_of(columns: dict, schema: pa.Schema) -> pa.Table:
    """``pa.Table.from_pydict(columns, schema=schema)`` for number and string columns (lists or numpy arrays),
    without ``pa.array`` (see :func:`arrow`)."""
    arrays = []
    for f in schema:
        values = columns[f.name]
        if pa.types.is_string(f.type):
            raw = [v.encode() for v in values]
            offsets = np.zeros(len(raw) + 1, np.int32)
            np.cumsum([len(b) for b in raw], out=offsets[1:])
            arrays.append(binary_array(np.frombuffer(b"".join(raw), np.uint8), offsets, type_=pa.string()))
        else:
            arrays.append(arrow(np.asarray(values, np.dtype(f.type.to_pandas_dtype()))))
    return pa.Table.from_arrays(arrays, schema=schema)


def gather_ranges(u8: np.ndarray, pos: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the byte ranges ``[pos, pos+lengths)`` of ``u8``: (data, int32 Arrow offsets)."""
    lengths = np.asarray(lengths, np.int64)
    pos = np.asarray(pos, np.int64)
    offsets = np.zeros(len(pos) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, np.uint8), offsets.astype(np.int32)
    # The k-th output byte comes from idx[k], a running sum whose step is 1 inside a range and jumps
    # to the next range's start at each boundary: two passes over the output, no Python loop.
    step = np.ones(total, np.int64)
    nonempty = lengths > 0
    starts = pos[nonempty]
    first_out = offsets[:-1][nonempty]
    prev_end = np.concatenate(([0], (starts + lengths[nonempty])[:-1]))
    jumps = starts - prev_end + 1
    jumps[0] = starts[0]
    step[first_out] = jumps
    return u8[np.cumsum(step)], offsets.astype(np.int32)


def binary_array(data: np.ndarray, offsets: np.ndarray, valid: np.ndarray | None = None,
                 type_: pa.DataType = pa.binary()) -> pa.Array:
    """A zero-copy Arrow binary/string array over ``data`` and int32 ``offsets`` (``valid``: not-null mask)."""
    validity = None
    null_count = 0
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        null_count = int(len(valid) - valid.sum())
    return pa.Array.from_buffers(type_, len(offsets) - 1,
                                 [validity, pa.py_buffer(np.ascontiguousarray(offsets, np.int32)),
                                  pa.py_buffer(data)], null_count=null_count)


def string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, int64 offsets rebased to 0) of a string/binary array; nulls read as empty strings."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if arr.type in (pa.large_string(), pa.large_binary()):
        arr = arr.cast(pa.string() if arr.type == pa.large_string() else pa.binary())
    if arr.null_count:
        arr = arr.fill_null("" if pa.types.is_string(arr.type) else b"")
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], np.int32, len(arr) + 1, arr.offset * 4).astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    data = data[offsets[0]:offsets[-1]]
    return data, offsets - offsets[0]


# Sort-based set operations. numpy 2.x answers a plain ``np.unique`` (and ``np.isin``, which calls it)
# with a hash table that is ~40x slower than a sort on millions of int64 (3.5 s vs 0.09 s for 3 M on the
# reference machine); these keep to sorts and binary searches.

def unique_sorted(x: np.ndarray) -> np.ndarray:
    """The distinct values of ``x``, ascending."""
    s = np.sort(x)
    if len(s) < 2:
        return s
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def unique_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values ascending, how often each occurs)."""
    s = np.sort(x)
    if len(s) == 0:
        return s, np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    return s[starts], np.diff(np.append(starts, len(s)))


def member_of(x: np.ndarray, sorted_values: np.ndarray) -> np.ndarray:
    """``np.isin(x, sorted_values)`` for an ascending ``sorted_values``."""
    if len(sorted_values) == 0:
        return np.zeros(len(x), bool)
    pos = np.minimum(np.searchsorted(sorted_values, x), len(sorted_values) - 1)
    return sorted_values[pos] == x


def pack(sizes: list[int], groups: int) -> list[list[int]]:
    """Indices of ``sizes`` in ``groups`` groups of about equal total (largest first, each to the
    lightest group), each group in index order; a size below 1 counts as 1.

    Spark pays a few hundred ms per task whatever it does, so many small files (or item chunks) share a
    task rather than take one each; the planners of :mod:`rocketidx.spark.stats` and
    :mod:`rocketidx.spark.verify` call this.
    """
    groups = max(1, min(groups, len(sizes)))
    load = [0] * groups
    members: list[list[int]] = [[] for _ in range(groups)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        g = min(range(groups), key=lambda g: (load[g], g))
        load[g] += max(1, sizes[i])
        members[g].append(i)
    return [sorted(m) for m in members if m]


def queue_groups(topic_index: np.ndarray, queue_id: np.ndarray) -> list[np.ndarray]:
    """The rows of each (topic, queue id), each group's rows in their given order (CommitLog order)."""
    order, starts = queue_order(topic_index, queue_id)
    return np.split(order, starts[1:-1])


def queue_order(topic_index: np.ndarray, queue_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows grouped by (topic, queue id), each group's rows in their given order (CommitLog order), and
    where each group starts in that order (its last item: the number of rows).

    Where both fit (topic index below 2**11, queue id in [0, 2**20)), one value sort of int64 keys
    (group << 32 | row) orders them: a stable argsort of the same keys costs several times as much. Any other
    ids take the stable argsort."""
    n = len(topic_index)
    t = topic_index.astype(np.int64)
    q = queue_id.astype(np.int64)
    if n < 2**32 and (not n or (t.max() < 2**11 and q.min() >= 0 and q.max() < 2**20)):
        key = np.sort(((t << 20 | q) << 32) | np.arange(n, dtype=np.int64))
        group = key >> 32
        order = key & 0xFFFFFFFF
    else:
        code = t << 32 | (q & 0xFFFFFFFF)
        order = np.argsort(code, kind="stable")
        group = code[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(group)) + 1, [n])) if n else np.zeros(1, np.int64)
    return order, starts.astype(np.int64)
