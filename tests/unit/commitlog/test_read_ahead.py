"""A segment scanned in pieces on threads (:func:`rocketidx.commitlog.readers.read_ahead`) reads what the
sequential reader reads: the same records arrays in order, the same entries, the same stops and counts. For
every scenario of the shared registry (invalid records, zero tails, blanks, torn records) and every golden
case, at piece sizes that put piece boundaries inside records and make a record span whole pieces, from the
log's start and from offsets inside it, found by search and given as a record's start.
"""
from __future__ import annotations

import numpy as np
import pytest

from refdata import GOLDEN_CASES
from scenarios import SCENARIOS

import rocketidx.commitlog.readers as readers
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
import rocketidx.layout as L

PIECES = [16, 61, 256, 1000, 4096]


def read(segments, threads: int, entries: bool, **kw):
    reader = CommitLogReader(segments, threads=threads, **kw)
    out = [(seg.name, recs.copy(), rest[0].to_pylist() if rest else None)
           for seg, _, recs, *rest in (reader.entry_chunks() if entries else reader.record_chunks())]
    return out, reader


def flat(chunks):
    """Records and entries per segment, whatever the batches (pieces cut batches elsewhere)."""
    by_seg: dict = {}
    for name, recs, entries in chunks:
        r, e = by_seg.setdefault(name, ([], []))
        r.append(recs)
        e.extend(entries or [])
    return {n: (np.concatenate(r) if r else None, e) for n, (r, e) in by_seg.items()}


def same_columns(recs):
    """Every column but REC_TOPIC_KEY, which names a record of the same batch (where batches start differs)."""
    return None if recs is None else np.delete(recs, L.REC_TOPIC_KEY, axis=1)


def assert_same(segments, piece, monkeypatch, entries=True, **kw):
    want, ref = read(segments, 1, entries, **kw)
    monkeypatch.setattr(readers, "PIECE_BYTES", piece)
    got, par = read(segments, 2, entries, **kw)
    a, b = flat(want), flat(got)
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(same_columns(a[name][0]), same_columns(b[name][0])), name
        assert a[name][1] == b[name][1], name
    assert [s.as_dict() for s in par.stops] == [s.as_dict() for s in ref.stops]
    assert (par.records, par.bytes_read, par.segments_read) == (ref.records, ref.bytes_read, ref.segments_read)
    return ref


@pytest.mark.parametrize("piece", PIECES)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_in_pieces_reads_as_one_pass(tmp_path, monkeypatch, name, piece):
    store = SCENARIOS[name].write(tmp_path / "store")
    segments = list_segments(str(store))
    for crc in (True, False):
        assert_same(segments, piece, monkeypatch, check_crc=crc)
        assert_same(segments, piece, monkeypatch, entries=False, check_crc=crc)


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=[c.name for c in GOLDEN_CASES])
def test_golden_cases_in_pieces_from_inside_the_log(case, monkeypatch):
    segments = list_segments(str(case / "commitlog"))
    ref = assert_same(segments, 4093, monkeypatch)
    assert ref.records > 0
    # From offsets inside the log: searched for, and given as where a record starts (an incremental build's read).
    recs = np.concatenate([r for _, _, r in CommitLogReader(segments[:1]).record_chunks()])
    starts = segments[0].base_offset + recs[:, L.REC_POS]
    rng = np.random.default_rng(len(case.name))
    for at in rng.choice(starts[1:], size=min(3, len(starts) - 1), replace=False):
        assert_same(segments, 4093, monkeypatch, start_offset=int(at), start_at_record=True)
        assert_same(segments, 1000, monkeypatch, start_offset=int(at) + 7)
    assert_same(segments, 65536, monkeypatch)


def test_a_piece_thread_stops_before_the_reader_returns(tmp_path, monkeypatch):
    """An abandoned read (the consumer stops early) waits for its threads: none scans a mapping the caller closes."""
    case = GOLDEN_CASES[0]
    segments = list_segments(str(case / "commitlog"))
    monkeypatch.setattr(readers, "PIECE_BYTES", 4096)
    reader = CommitLogReader(segments, threads=2)
    chunks = reader.entry_chunks()
    next(chunks)
    chunks.close()
    import threading
    assert not [t for t in threading.enumerate() if t.name.startswith("read-ahead")]
