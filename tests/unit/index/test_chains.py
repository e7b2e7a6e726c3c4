"""putKey's slot chains two ways: the kernel's loop (``index_put``, one step per entry, as the broker does it) and
the numpy reference (``_chains``, one sort per batch), on random batches over tables with earlier entries."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rocketidx.layout as L
from rocketidx.commitlog.native import kernel
from rocketidx.index.writer import _chains


def put_key(slots: list[int], slot: list[int], first: int) -> tuple[list[int], int]:
    """IndexFile.putKey, entry by entry."""
    prev, empty = [], 0
    for i, s in enumerate(slot):
        v = slots[s]
        if v <= L.INVALID_INDEX or v > first + i:
            v, empty = L.INVALID_INDEX, empty + 1
        prev.append(v)
        slots[s] = first + i
    return prev, empty


@settings(max_examples=200, deadline=None)
@given(n_slots=st.integers(1, 40), data=st.data())
def test_both_chains_are_put_keys(n_slots, data):
    first = data.draw(st.integers(1, 500))
    table = data.draw(st.lists(st.integers(0, first - 1), min_size=n_slots, max_size=n_slots))
    slot = data.draw(st.lists(st.integers(0, n_slots - 1), min_size=1, max_size=80))
    want_slots = list(table)
    want_prev, want_empty = put_key(want_slots, slot, first)
    ways = [("numpy", lambda s, k: _chains(s, k, first))]
    if kernel is not None:
        def native(s, k):
            prev = np.empty(len(k), np.int64)
            return prev, kernel.index_put(s, k, first, prev)
        ways.append(("kernel", native))
    for name, way in ways:
        slots = np.asarray(table, L.SLOT)
        prev, empty = way(slots, np.asarray(slot, np.int64))
        assert (prev.tolist(), empty, slots.tolist()) == (want_prev, want_empty, want_slots), name


@pytest.mark.skipif(kernel is None, reason="the compiled kernel is not built")
def test_the_kernel_refuses_an_entry_without_a_slot():
    with pytest.raises(ValueError, match="no slot"):
        kernel.index_put(np.zeros(4, L.SLOT), np.asarray([1, -1], np.int64), 1, np.empty(2, np.int64))
