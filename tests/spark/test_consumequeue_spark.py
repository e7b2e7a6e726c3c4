"""ConsumeQueues on Spark: RocketMQ's files and answers for every golden case and every spec case, at 1, 2 and 7
write tasks and 64 KiB splits, the manifest and summary of the in-process build, one commit with the index."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cq_damage import EXPECT, damage, log_end
from refdata import GOLDEN_CASES

from rocketidx.build.in_process import build_index
from rocketidx.cli import main
from rocketidx.config import BuildConfig
from rocketidx.output.open import open_consumequeues
from rocketidx.spark.build import build_index_spark

pytestmark = pytest.mark.spark

CQ_CASES = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()]
SPEC = Path(__file__).resolve().parents[1] / "reference" / "cq-spec"
SPEC_CASES = sorted(p for p in SPEC.glob("s[0-9]*") if (p / "case.json").exists())


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def config_of(case: Path, targets=("consumequeue",)) -> BuildConfig:
    c = json.loads((case / "case.json").read_text())
    size = json.loads((case / "expected" / "cq-manifest.json").read_text())["mappedFileSizeConsumeQueue"]
    return BuildConfig(c.get("hashSlotNum", 5_000_000), c.get("indexNum", 20_000_000), c.get("windowMillis", 3_600_000),
                       "UTC", targets=targets, cq_file_size=size,
                       delay_levels=c.get("messageDelayLevel") or BuildConfig().delay_levels)


def answers_match(out: Path, case: Path) -> None:
    queues = open_consumequeues(out)
    for line in (case / "expected" / "cq-lookups.jsonl").read_text().splitlines():
        q = json.loads(line)
        got = queues.get(q["topic"], q["queueId"], q["queueOffset"])
        assert (None if got is None else dict(zip(("phyOffset", "size", "tagsCode"), got))) == q["answer"], q


def same_as_in_process(out: Path, manifest: dict, summary, case: Path, config: BuildConfig, tmp_path: Path) -> None:
    ref, ref_summary = build_index(case / "commitlog", tmp_path / "in-process", config)
    assert {k: v for k, v in manifest.items() if k != "created"} == {k: v for k, v in ref.items() if k != "created"}
    assert {k: v for k, v in summary.as_dict().items() if k != "wall_s"} == \
        {k: v for k, v in ref_summary.as_dict().items() if k != "wall_s"}


@pytest.mark.parametrize("partitions", [1, 2, 7])
@pytest.mark.parametrize("case", CQ_CASES, ids=lambda c: c.name)
def test_golden_queues_on_spark(spark, tmp_path, case, partitions):
    config = config_of(case)
    manifest, summary = build_index_spark(case / "commitlog", tmp_path / "out", config, spark=spark,
                                          split_bytes=65536, shuffle_partitions=partitions)
    got, want = tree(tmp_path / "out" / "consumequeue"), tree(case / "expected" / "consumequeue")
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
    answers_match(tmp_path / "out", case)
    same_as_in_process(tmp_path / "out", manifest, summary, case, config, tmp_path)


@pytest.mark.parametrize("case", SPEC_CASES, ids=lambda c: c.name)
def test_spec_cases_on_spark(spark, tmp_path, case):
    config = config_of(case)
    manifest, summary = build_index_spark(case / "commitlog", tmp_path / "out", config, spark=spark,
                                          split_bytes=1000, shuffle_partitions=2)
    got, want = tree(tmp_path / "out" / "consumequeue"), tree(case / "expected" / "consumequeue")
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
    same_as_in_process(tmp_path / "out", manifest, summary, case, config, tmp_path)


@pytest.mark.parametrize("case", CQ_CASES[:2], ids=lambda c: c.name)
def test_index_and_queues_in_one_spark_build(spark, tmp_path, case):
    config = config_of(case, ("index", "consumequeue"))
    manifest, summary = build_index_spark(case / "commitlog", tmp_path / "out", config, spark=spark,
                                          split_bytes=65536, shuffle_partitions=2)
    assert tree(tmp_path / "out" / "consumequeue") == tree(case / "expected" / "consumequeue")
    assert manifest["files"] and manifest["targets"] == ["index", "consumequeue"]
    same_as_in_process(tmp_path / "out", manifest, summary, case, config, tmp_path)
    assert tree(tmp_path / "out" / "index") == tree(tmp_path / "in-process" / "index")


def test_the_command_builds_queues_on_spark(spark, tmp_path, capsys):
    case = CQ_CASES[0]
    size = json.loads((case / "expected" / "cq-manifest.json").read_text())["mappedFileSizeConsumeQueue"]
    assert main(["build", "--commitlog", str(case / "commitlog"), "--out", str(tmp_path / "o"), "--targets",
                 "consumequeue", "--cq-file-size", str(size), "--master", "local[2]", "--split-bytes", "65536",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["engine"]["name"] == "spark" and report["consumequeue"]["files"] == len(tree(case / "expected" / "consumequeue"))
    assert tree(tmp_path / "o" / "consumequeue") == tree(case / "expected" / "consumequeue")


# --- verify on Spark: the log's queues rebuilt there, the same report as in process --------------------------

@pytest.mark.parametrize("case", CQ_CASES, ids=lambda c: c.name)
def test_clean_queues_verify_clean_on_spark(spark, case):
    from rocketidx.spark.verify import verify_consumequeues_spark
    report = verify_consumequeues_spark(str(case / "expected" / "consumequeue"), case / "commitlog", spark=spark,
                                        split_bytes=65536)
    assert report.clean and report.expected_entries == report.entries_checked > 0


def test_every_damage_gives_the_in_process_report_on_spark(spark, tmp_path, monkeypatch):
    import shutil

    import rocketidx.spark.build as spark_build
    from rocketidx.spark.verify import verify_consumequeues_spark
    from rocketidx.verify.queues import verify_consumequeues
    case = CQ_CASES[0]
    # The Spark rebuild (4 KiB splits: over 200 read tasks, ~8 s) is given the CommitLog, the queue file size and
    # the delay levels, never the damaged files: the same job for every damage. Each distinct set of arguments
    # runs on Spark once; a later verify given the same ones gets that rebuild's result and its files (copied
    # into the verify's own scratch directory), and compares and reports as it would after a job of its own.
    real, rebuilt = spark_build.queues_on_spark, {}

    def rebuild_once(spark_, segments, spec, file_size, delays_ms, staging, *args, **kw):
        key = repr((segments, spec, file_size, tuple(delays_ms), args, sorted(kw.items())))
        if key not in rebuilt:
            built = real(spark_, segments, spec, file_size, delays_ms, staging, *args, **kw)
            kept = tmp_path / f"rebuilt-{len(rebuilt)}"
            shutil.copytree(staging, kept)
            rebuilt[key] = built, kept
        built, kept = rebuilt[key]
        shutil.copytree(kept, staging, dirs_exist_ok=True)
        return built
    monkeypatch.setattr(spark_build, "queues_on_spark", rebuild_once)
    for kind in sorted(EXPECT):
        root = tmp_path / kind / "consumequeue"
        shutil.copytree(case / "expected" / "consumequeue", root)
        damage(kind, root, log_end(case))
        on_spark = verify_consumequeues_spark(str(root), case / "commitlog", spark=spark, split_bytes=4096)
        assert on_spark.as_dict() == verify_consumequeues(str(root), case / "commitlog").as_dict(), kind
        assert EXPECT[kind] in on_spark.counts, kind


def test_the_verify_command_runs_on_spark_and_refuses_spark_without_the_log(spark, tmp_path, capsys):
    case = CQ_CASES[0]
    assert main(["verify", "--consumequeue", str(case / "expected" / "consumequeue"), "--commitlog",
                 str(case / "commitlog"), "--master", "local[2]", "--split-bytes", "65536"]) == 0
    out = capsys.readouterr().out
    assert "engine: spark" in out and "clean" in out
    assert main(["verify", "--consumequeue", str(case / "expected" / "consumequeue"), "--master", "local[2]"]) == 2
    assert "needs a check with --commitlog" in capsys.readouterr().err


def test_one_read_feeds_both_targets_on_spark_for_a_range_too(spark, tmp_path):
    """The index's direct tasks dispatch the pieces they read: no second read, the in-process range's bytes."""
    from rocketidx.build.in_process import build_index_range
    case = CQ_CASES[0]
    config = config_of(case, ("index", "consumequeue"))
    whole, _ = build_index(case / "commitlog", tmp_path / "whole", config)
    middle = whole["segments"][1]["base_offset"] + 777
    for bounds in ({}, {"from_offset": middle}, {"to_time_ms": _middle_time(tmp_path / "whole")}):
        stats: dict = {}
        name = "-".join(bounds) or "all"
        manifest, _ = build_index_spark(case / "commitlog", tmp_path / f"spark-{name}", config, spark=spark,
                                        split_bytes=65536, shuffle_partitions=2, stats=stats, **bounds)
        assert stats["mode"] == "direct" and stats["consumequeue"]["read"].startswith("with the index")
        ref, _ = build_index_range(case / "commitlog", tmp_path / f"ref-{name}", config, **bounds)
        assert manifest["consumequeues"] == ref["consumequeues"] and manifest["files"] == ref["files"]
        assert tree(tmp_path / f"spark-{name}" / "consumequeue") == tree(tmp_path / f"ref-{name}" / "consumequeue")
        assert tree(tmp_path / f"spark-{name}" / "index") == tree(tmp_path / f"ref-{name}" / "index")


def _middle_time(out: Path) -> int:
    m = json.loads((out / "_manifest.json").read_text())
    return (m["files"][0]["begin_timestamp"] + m["files"][-1]["end_timestamp"]) // 2


def test_a_topic_that_would_escape_out_is_one_line_on_spark_and_nothing_is_written(spark, tmp_path, capsys):
    from scenarios import Rec, lay_segment, write_segments
    good = [Rec(queue_offset=i, body=b"x" * 150) for i in range(6)]
    store = write_segments(tmp_path / "store", [lay_segment(good[:3] + [Rec(topic=b"../../escape", body=b"y" * 150)]
                                                             + good[3:])])
    out = tmp_path / "deep" / "out"
    assert main(["build", "--commitlog", str(store), "--out", str(out), "--targets", "consumequeue", "--master",
                 "local[2]", "--split-bytes", "300"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be a ConsumeQueue directory name" in err[0] and "'../../escape'" in err[0]
    assert not (tmp_path / "escape").exists() and not (tmp_path / "deep" / "escape").exists()
    assert not (out / "consumequeue").exists()


def test_queues_from_s3_into_s3_on_spark_are_rocketmqs(spark, s3_server, tmp_path):
    """Read tasks upload their pieces, write tasks make each file locally and upload it whole, the commit keeps
    ``consumequeue/`` in the version: the files are the broker's, for the queues alone and with the index."""
    from s3server import committed_queues
    case = CQ_CASES[1]
    bucket = s3_server.new_bucket()
    commitlog = f"s3://{bucket}/store/commitlog"
    s3_server.upload_dir(str(case / "commitlog"), commitlog)
    for targets in (("consumequeue",), ("index", "consumequeue")):
        out = f"s3://{bucket}/out-{len(targets)}"
        stats: dict = {}
        manifest, _ = build_index_spark(commitlog, out, config_of(case, targets), spark=spark, split_bytes=65536,
                                        shuffle_partitions=2, stats=stats)
        assert committed_queues(out) == tree(case / "expected" / "consumequeue")
        ref, _ = build_index(case / "commitlog", tmp_path / f"ref-{len(targets)}", config_of(case, targets))
        assert manifest["consumequeues"] == {**ref["consumequeues"]}


def test_verify_store_on_spark_gives_the_in_process_report(spark, tmp_path, capsys):
    from store_scenarios import scenario, store_of

    from rocketidx.spark.verify import verify_store_spark
    from rocketidx.verify.store import verify_store
    case = CQ_CASES[0]
    store, sizes = store_of(case, tmp_path / "store")
    assert verify_store_spark(store, spark=spark, split_bytes=65536, **sizes).as_dict() == \
        verify_store(store, **sizes).as_dict()
    scenario("dirty-tail", store, case)
    on_spark = verify_store_spark(store, spark=spark, split_bytes=65536, **sizes)
    assert on_spark.as_dict() == verify_store(store, **sizes).as_dict() and not on_spark.clean
    assert main(["verify", "--store", str(store), "--hash-slots", str(sizes["hash_slot_num"]), "--index-num",
                 str(sizes["index_num"]), "--master", "local[2]", "--split-bytes", "65536"]) == 1
    out = capsys.readouterr().out
    assert "engine: spark" in out and "dirty-tail" in out
