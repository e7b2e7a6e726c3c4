"""rocketidx query --store: broker semantics, --exact drops hash collisions, --show decodes messages."""
from __future__ import annotations

import json
import shutil

import pytest

from refdata import GOLDEN
from rocketidx.build.in_process import build_index
from rocketidx.cli import main
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import BuildConfig
from rocketidx.query.lookup import message_has_key, read_messages_at

G2 = GOLDEN / "g2-unicode-collisions-v2-ipv6"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """g2 laid out as a broker store: commitlog/ and index/ (sizes 1000/1000)."""
    root = tmp_path_factory.mktemp("q")
    out = root / "out"
    manifest, _ = build_index(G2 / "commitlog", out, BuildConfig(hash_slot_num=1000, index_num=1000,
                                                                 window_ms=600000, timezone="UTC"))
    store = root / "store"
    shutil.copytree(G2 / "commitlog", store / "commitlog")
    (store / "index").mkdir()
    for f in manifest["files"]:
        shutil.copy(out / "index" / f["name"], store / "index" / f["name"])
    return store


def queries(kind_prefix: str) -> list[dict]:
    lines = (G2 / "expected" / "queries.jsonl").read_text().splitlines()
    return [q for q in map(json.loads, lines) if q["kind"].startswith(kind_prefix)]


def run(capsys, *args) -> list[dict]:
    assert main(["query", *args]) == 0
    return [json.loads(l) for l in capsys.readouterr().out.splitlines() if l.startswith("{")]


def messages_by_offset() -> dict[int, dict]:
    out = {}
    for b in CommitLogReader(list_segments(G2 / "commitlog")):
        for r in b.to_pylist():
            out[r["phy_offset"]] = r
    return out


def test_store_answers_like_the_broker(store, capsys, tmp_path):
    qs = queries("present:")[:40] + queries("collide:")
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("\n".join(json.dumps(q) for q in qs))
    got = run(capsys, "--store", str(store), "--hash-slots", "1000", "--index-num", "1000", "--queries", str(qfile))
    assert [g["offsets"] for g in got] == [q["offsets"] for q in qs]


def test_exact_drops_offsets_of_other_keys_with_the_same_hash(store, capsys, tmp_path):
    msgs = messages_by_offset()
    collide = [q for q in queries("collide:same-hashCode") if q["offsets"]]
    assert collide, "g2 has same-hashCode queries that the broker answers with another key's offsets"
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("\n".join(json.dumps(q) for q in collide))
    got = run(capsys, "--store", str(store), "--hash-slots", "1000", "--index-num", "1000", "--queries", str(qfile),
              "--exact")
    dropped = 0
    for q, g in zip(collide, got):
        # Exactly the broker's offsets whose message makes the entry topic#key, in the broker's order.
        expected = [o for o in q["offsets"] if message_has_key(msgs.get(o), q["topic"], q["key"])]
        assert g["offsets"] == expected
        dropped += len(q["offsets"]) - len(expected)
    assert dropped > 0
    present = [q for q in queries("present:single") if q["offsets"]][:10]
    qfile.write_text("\n".join(json.dumps(q) for q in present))
    got = run(capsys, "--store", str(store), "--hash-slots", "1000", "--index-num", "1000", "--queries", str(qfile),
              "--exact")
    for q, g in zip(present, got):
        assert set(g["offsets"]) <= set(q["offsets"]) and g["offsets"]


def test_show_decodes_each_message(store, capsys):
    q = [q for q in queries("present:nonBmp") if q["offsets"]][0]
    rows = run(capsys, "--store", str(store), "--hash-slots", "1000", "--index-num", "1000", "--topic", q["topic"],
               "--key", q["key"], "--show", "--json")
    assert [r["phy_offset"] for r in rows] == q["offsets"]
    for r in rows:
        assert r["topic"] == q["topic"]
        assert q["key"] in (r["keys"] or "").split(" ") or r["uniq_key"] == q["key"]
        assert ":" in r["born_host"] and "body_preview" in r
    assert main(["query", "--store", str(store), "--hash-slots", "1000", "--index-num", "1000", "--topic",
                 q["topic"], "--key", q["key"], "--show"]) == 0
    text = capsys.readouterr().out
    assert f"{len(q['offsets'])} message(s)" in text and "properties" in text


def test_show_json_names_each_message_s_segment_and_its_offset_inside_it(store, capsys):
    """--show --json reports the record as the reader does: its segment and its offset in that segment (not 0,
    the offset inside the record alone that is read back), for messages in every segment of the log."""
    msgs = messages_by_offset()
    qs = [q for q in queries("present:") if q["offsets"]]
    seen_segments = set()
    for q in qs[:60]:
        rows = run(capsys, "--store", str(store), "--hash-slots", "1000", "--index-num", "1000", "--topic", q["topic"],
                   "--key", q["key"], "--show", "--json")
        for r in rows:
            want = msgs[r["phy_offset"]]
            assert (r["segment"], r["segment_offset"]) == (want["segment"], want["segment_offset"])
            assert r["segment_offset"] == r["phy_offset"] - int(r["segment"])
            seen_segments.add(r["segment"])
    assert len(seen_segments) > 1 and any(int(m["segment_offset"]) for m in msgs.values())


def iso(ms: int, zulu: bool) -> str:
    from rocketidx.units import format_utc
    text = format_utc(ms, iso=True)
    return text.replace("+00:00", "Z") if zulu else text


def test_begin_and_end_take_iso_8601_times_as_every_time_flag_does(store, capsys, tmp_path):
    """--begin/--end (and a --queries line's begin/end) accept ISO-8601 as well as epoch ms, with the same
    answers as the broker's for those times."""
    timed = [q for q in queries("present:") if q["begin"] > 0 and q["end"] < 2**63 - 1][:12]
    assert any(q["offsets"] for q in timed) and any(not q["offsets"] for q in timed)
    for n, q in enumerate(timed):
        got = run(capsys, "--store", str(store), "--hash-slots", "1000", "--index-num", "1000", "--topic", q["topic"],
                  "--key", q["key"], "--max", str(q["maxNum"]), "--begin", iso(q["begin"], n % 2 == 0),
                  "--end", iso(q["end"], n % 2 == 1))
        assert (got[0]["begin"], got[0]["end"], got[0]["offsets"]) == (q["begin"], q["end"], q["offsets"])
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("\n".join(json.dumps(dict(q, begin=iso(q["begin"], True), end=iso(q["end"], False)))
                               for q in timed))
    got = run(capsys, "--store", str(store), "--hash-slots", "1000", "--index-num", "1000", "--queries", str(qfile))
    assert [(g["begin"], g["end"], g["offsets"]) for g in got] == [(q["begin"], q["end"], q["offsets"]) for q in timed]
    with pytest.raises(SystemExit) as bad:
        main(["query", "--store", str(store), "--topic", "T", "--key", "k", "--begin", "yesterday"])
    assert bad.value.code == 2 and "--begin" in capsys.readouterr().err
    qfile.write_text(json.dumps({"topic": "T", "key": "k", "begin": "yesterday"}))
    assert main(["query", "--store", str(store), "--queries", str(qfile)]) == 2
    assert "begin" in capsys.readouterr().err
    qfile.write_text(json.dumps({"topic": "T", "key": "k", "maxNum": "many"}))
    assert main(["query", "--store", str(store), "--queries", str(qfile)]) == 2
    err = capsys.readouterr().err
    assert "maxNum" in err and len(err.splitlines()) == 1


def test_offset_without_a_message_reads_as_none(store):
    table, found = read_messages_at(store / "commitlog", [0, 5, 10**9])
    assert found == [True, False, False]
    assert table.column("topic").to_pylist()[1:] == [None, None]


def test_show_without_a_commitlog_is_a_usage_error(tmp_path, capsys):
    assert main(["query", "--index", str(tmp_path), "--topic", "T", "--key", "k", "--show"]) == 2
    assert "--show" in capsys.readouterr().err


def test_a_bare_broker_index_is_opened_with_the_sizes_its_files_tell(tmp_path):
    """No manifest and no flags: a full file gives indexNum, the file size the slots; verify agrees."""
    from brokerstore import ITEMS, SLOTS, broker_store
    from rocketidx.query.lookup import open_index
    store, files = broker_store(tmp_path, 6000)
    opened = open_index(store / "index")
    assert [(f.hash_slot_num, f.index_num) for f in opened] == [(SLOTS, ITEMS)] * len(files)
    assert main(["verify", "--index", str(store / "index"), "--commitlog", str(store)]) == 0


@pytest.mark.parametrize("content", [b"", b"garbage", bytes(1000)], ids=["empty", "short", "zeros"])
def test_a_bare_directory_of_junk_is_a_clear_size_error(tmp_path, content, capsys):
    """Files that tell no sizes fall back to the broker defaults, which they do not fit: a typed error
    naming the file, exit code 2, no traceback."""
    from rocketidx.errors import CorruptIndexError
    from rocketidx.query.lookup import open_index
    (tmp_path / "20240101000000000").write_bytes(content)
    with pytest.raises(CorruptIndexError, match="20240101000000000"):
        open_index(tmp_path)
    assert main(["query", "--index", str(tmp_path), "--topic", "T", "--key", "k"]) == 2
    assert "20240101000000000" in capsys.readouterr().err
