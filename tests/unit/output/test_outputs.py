"""Build outputs without a JVM: the local layout and the ``OUT/CURRENT`` layout on any filesystem pyarrow.fs
opens, behind one interface (lock, staging, task files, commit, discard).

:class:`rocketidx.output.remote.RemoteOutput` runs on the test S3 server (tests/support/s3server.py: no renames, a
PUT replaces an object whole) and on pyarrow's LocalFileSystem (a filesystem with renames, as HDFS has):
the commit names files as the local commit does, a second commit replaces the first and keeps it for
its readers until the next build starts, a held lock or a failed commit leaves the previous output
readable. Then both kinds through the same calls, as the Spark build makes them.
"""
from __future__ import annotations

import json
import os
from datetime import timezone

import pyarrow.fs as pafs
import pytest

from rocketidx.errors import StoreLayoutError, StoreLockedError
from rocketidx.index.reader import Header
from rocketidx.index.writer import FileInfo
from rocketidx.output.local import CURRENT_FILE, INDEX_DIR, LOCK, MANIFEST, SUCCESS, LocalOutput, commit, new_staging
from rocketidx.output.remote import RemoteOutput, read_manifest_uri
import rocketidx.output.remote as remote_output
from rocketidx.output.target import TaskFiles, open_output, read_manifest
from rocketidx.storage import join_uri
import rocketidx.storage as storage

HOUR_MS = 3_600_000
UTC = timezone.utc


def staged_files(write, prefix: str) -> list[FileInfo]:
    """Three staged files over two windows, given out of order; ``write(name, data)`` puts each one."""
    files = [FileInfo(f"{w * HOUR_MS:015d}_{seq:04d}", w, w * HOUR_MS, seq,
                      Header(w * HOUR_MS + seq * 1000, w * HOUR_MS + seq * 1000 + 5, 100 * seq, 100 * seq + 1, 3,
                             2 + seq))
             for w, seq in ((473_612, 1), (473_611, 0), (473_612, 0))]
    for f in files:
        write(f.name, f"{prefix}:{f.name}".encode())
    return files


@pytest.fixture(params=["s3", "renames"])
def remote(request, tmp_path) -> RemoteOutput:
    if request.param == "renames":  # pyarrow's LocalFileSystem: not how rocketidx opens a path, but it renames
        return RemoteOutput(pafs.LocalFileSystem(), str(tmp_path / "out"), str(tmp_path / "out"))
    return RemoteOutput.from_uri(f"s3://{request.getfixturevalue('s3_server').new_bucket()}/out")


def stage(remote: RemoteOutput, prefix: str):
    staging = remote.new_staging()

    def write(name, data):
        with remote.fs.open_output_stream(f"{staging.path}/{INDEX_DIR}/{name}") as f:
            f.write(data)
    return staging, staged_files(write, prefix)


def read(remote: RemoteOutput, *parts: str) -> bytes:
    with remote.fs.open_input_stream(remote.path(*parts)) as f:
        return f.read()


def listing(remote: RemoteOutput, *parts: str) -> list[str]:
    selector = pafs.FileSelector(remote.path(*parts), allow_not_found=True)
    return sorted(i.base_name for i in remote.fs.get_file_info(selector))


# --- the remote output alone ----------------------------------------------------------------------

def test_commit_names_the_files_as_the_local_commit_does_and_points_current_at_them(remote, tmp_path):
    local = tmp_path / "local"
    local_staging = new_staging(local)
    local_files = staged_files(lambda n, d: (local_staging / INDEX_DIR / n).write_bytes(d), "b1")
    expected = commit(local, local_staging, local_files, {"version": 1}, UTC, name_after="20231114220000000")

    with remote.lock(settle_s=0):
        staging, files = stage(remote, "b1")
        manifest = remote.commit(staging, files, {"version": 1}, UTC, name_after="20231114220000000")

    assert manifest == expected
    version = read(remote, CURRENT_FILE).decode()
    assert version == staging.name + "\n" and version.startswith(".v-")
    assert remote.current_version() == staging.name
    assert json.loads(read(remote, staging.name, MANIFEST)) == expected
    assert listing(remote, staging.name, INDEX_DIR) == sorted(f["name"] for f in expected["files"])
    for f in expected["files"]:
        assert read(remote, staging.name, INDEX_DIR, f["name"]) == (local / INDEX_DIR / f["name"]).read_bytes()
    assert listing(remote) == sorted([CURRENT_FILE, SUCCESS, staging.name])  # lock gone, no temporary files
    assert remote.read_manifest() == expected


def test_a_second_commit_replaces_the_first_and_keeps_it_until_the_next_build(remote):
    """A reader that resolved the first version a moment before the second commit reads on there."""
    with remote.lock(settle_s=0):
        first, files = stage(remote, "b1")
        remote.commit(first, files, {}, UTC)
    with remote.lock(settle_s=0):
        second, files = stage(remote, "b2")
        manifest = remote.commit(second, files, {}, UTC)
    assert remote.current_version() == second.name
    assert listing(remote) == sorted([CURRENT_FILE, SUCCESS, first.name, second.name])
    name = manifest["files"][0]["name"]
    assert read(remote, second.name, INDEX_DIR, name).startswith(b"b2:")
    with remote.lock(settle_s=0):
        third = remote.new_staging()
    assert listing(remote) == sorted([CURRENT_FILE, SUCCESS, second.name, third.name])


def test_new_staging_removes_versions_current_does_not_name(remote):
    with remote.lock(settle_s=0):
        kept, files = stage(remote, "b1")
        remote.commit(kept, files, {}, UTC)
    crashed, _ = stage(remote, "crashed")  # a killed build's version and half-written pointer
    with remote.fs.open_output_stream(remote.path(CURRENT_FILE + ".tmp-dead")) as f:
        f.write(crashed.name.encode())
    assert listing(remote) == sorted([CURRENT_FILE, CURRENT_FILE + ".tmp-dead", SUCCESS, kept.name, crashed.name])
    fresh = remote.new_staging()
    assert listing(remote) == sorted([CURRENT_FILE, SUCCESS, kept.name, fresh.name])
    assert remote.current_version() == kept.name


def test_a_failed_commit_leaves_the_previous_output_readable(remote, monkeypatch):
    with remote.lock(settle_s=0):
        first, files = stage(remote, "b1")
        before = remote.commit(first, files, {}, UTC)

    def fail(self, version):
        raise OSError("connection reset while writing CURRENT")
    monkeypatch.setattr(RemoteOutput, "_write_current", fail)
    with pytest.raises(OSError, match="connection reset"):
        with remote.lock(settle_s=0):
            second, files = stage(remote, "b2")
            try:
                remote.commit(second, files, {}, UTC)
            except BaseException:
                remote.discard(second)
                raise
    assert remote.current_version() == first.name
    assert remote.read_manifest() == before
    assert read(remote, first.name, INDEX_DIR, before["files"][0]["name"]).startswith(b"b1:")
    assert LOCK not in listing(remote) and second.name not in listing(remote)


def test_a_held_lock_refuses_a_second_build_and_says_how_to_clear_it(remote):
    with remote.lock(settle_s=0):
        with pytest.raises(StoreLockedError) as e:
            with remote.lock(settle_s=0):
                pass  # pragma: no cover
        assert LOCK in listing(remote), "the refused build must not remove the holder's lock"
    assert e.value.path == remote.uri
    assert f"pid {os.getpid()}" in str(e.value)
    assert join_uri(remote.uri, LOCK) in str(e.value) and "delete it" in str(e.value)
    assert LOCK not in listing(remote)


def test_a_lock_left_by_a_killed_build_stays_until_deleted(remote):
    remote.fs.create_dir(remote.root, recursive=True)
    with remote.fs.open_output_stream(remote.path(LOCK)) as f:
        f.write(json.dumps({"owner": "dead", "host": "gone", "pid": 1, "since": "2024-01-01T00:00:00+00:00"}).encode())
    with pytest.raises(StoreLockedError, match="held by gone pid 1 since 2024-01-01"):
        with remote.lock(settle_s=0):
            pass  # pragma: no cover
    remote.fs.delete_file(remote.path(LOCK))
    with remote.lock(settle_s=0):
        assert json.loads(read(remote, LOCK))["pid"] == os.getpid()


def test_a_build_that_loses_the_lock_race_stops_and_leaves_the_winners_lock(remote, monkeypatch):
    winner = {"owner": "other", "host": "elsewhere", "pid": 7, "since": "now"}

    def overwritten_meanwhile(seconds):
        with remote.fs.open_output_stream(remote.path(LOCK)) as f:
            f.write(json.dumps(winner).encode())
    monkeypatch.setattr(remote_output.time, "sleep", overwritten_meanwhile)
    with pytest.raises(StoreLockedError, match="held by elsewhere pid 7"):
        with remote.lock():
            pass  # pragma: no cover
    assert json.loads(read(remote, LOCK)) == winner


def test_current_is_one_put_on_an_object_store(remote, monkeypatch):
    monkeypatch.setattr(remote_output, "PUT_ATOMIC", frozenset({remote.fs.type_name}))
    moves = []
    monkeypatch.setattr(RemoteOutput, "move", lambda self, src, dst: moves.append(src) or self.fs.move(src, dst))
    with remote.lock(settle_s=0):
        staging, files = stage(remote, "b1")
        remote.commit(staging, files, {}, UTC)
    assert remote.current_version() == staging.name
    assert not [m for m in moves if CURRENT_FILE in m]


def test_a_local_layout_output_is_not_taken_for_a_remote_one(tmp_path):
    local = tmp_path / "out"
    staging = new_staging(local)
    files = staged_files(lambda n, d: (staging / INDEX_DIR / n).write_bytes(d), "b1")
    commit(local, staging, files, {}, UTC)
    with pytest.raises(StoreLayoutError, match="was not written by a rocketidx build to a URI"):
        with RemoteOutput.from_uri(local.as_uri()).lock(settle_s=0):
            pass  # pragma: no cover


def test_a_current_that_names_no_version_is_a_layout_error(remote):
    remote.fs.create_dir(remote.root, recursive=True)
    with remote.fs.open_output_stream(remote.path(CURRENT_FILE)) as f:
        f.write(b"../elsewhere\n")
    with pytest.raises(StoreLayoutError, match="not a version directory"):
        remote.current_version()


def test_read_manifest_takes_a_uri(tmp_path):
    uri = (tmp_path / "out").as_uri()
    assert read_manifest(uri) is None
    remote = RemoteOutput.from_uri(uri)
    with remote.lock(settle_s=0):
        staging, files = stage(remote, "b1")
        manifest = remote.commit(staging, files, {"version": 1}, UTC)
    assert read_manifest(uri) == read_manifest_uri(uri) == manifest
    assert read_manifest(tmp_path / "out") == manifest  # readers follow CURRENT in a local directory too


def test_a_pointer_move_cut_short_is_recovered_not_thrown_away(remote):
    """HDFS moves over a file by deleting it first: a kill in between leaves only the temporary pointer."""
    with remote.lock(settle_s=0):
        old, files = stage(remote, "b1")
        remote.commit(old, files, {}, UTC)
        new, files = stage(remote, "b2")
        remote.commit(new, files, {}, UTC)
    with remote.fs.open_output_stream(remote.path(CURRENT_FILE + ".tmp-cut")) as f:
        f.write((new.name + "\n").encode())
    remote.fs.delete_file(remote.path(CURRENT_FILE))
    fresh = remote.new_staging()
    assert remote.current_version() == new.name
    assert listing(remote) == sorted([CURRENT_FILE, SUCCESS, new.name, fresh.name])


def test_a_local_build_refuses_a_directory_with_the_remote_layout(tmp_path):
    remote = RemoteOutput.from_uri((tmp_path / "out").as_uri())
    with remote.lock(settle_s=0):
        staging, files = stage(remote, "b1")
        remote.commit(staging, files, {}, UTC)
    with pytest.raises(StoreLayoutError, match="remote layout"):
        new_staging(tmp_path / "out")
    assert remote.current_version() == staging.name and listing(remote, staging.name, INDEX_DIR)


def test_commit_moves_each_file_once_from_where_the_tasks_left_it(remote, monkeypatch):
    """On an object store a move copies the whole file: task directory -> final name, once each."""
    moved = []
    real_move = RemoteOutput.move
    monkeypatch.setattr(RemoteOutput, "move", lambda self, a, b: (moved.append((a, b)), real_move(self, a, b)))
    with remote.lock(settle_s=0):
        staging = remote.new_staging()
        task_dir = f"{staging.path}/_tasks/p00000-t1-abc"
        remote.fs.create_dir(task_dir, recursive=True)

        def write(name, data):
            with remote.fs.open_output_stream(f"{task_dir}/{name}") as f:
                f.write(data)
        files = staged_files(write, "b1")
        sources = {f.name: f"{task_dir}/{f.name}" for f in files}
        manifest = remote.commit(staging, files, {}, UTC, sources=sources)
    assert sorted(a for a, _ in moved) == sorted(sources.values())
    assert sorted(b.rsplit("/", 1)[1] for _, b in moved) == sorted(f["name"] for f in manifest["files"])
    assert listing(remote, staging.name, INDEX_DIR) == sorted(f["name"] for f in manifest["files"])
    assert listing(remote, staging.name, "_tasks", "p00000-t1-abc") == []

def test_join_uri_keeps_the_query_at_the_end():
    assert join_uri("s3://bucket/out/?region=eu-west-1", ".v-1", "index") == "s3://bucket/out/.v-1/index?region=eu-west-1"
    assert join_uri("file:///tmp/out", CURRENT_FILE) == "file:///tmp/out/CURRENT"
    assert join_uri("hdfs://nn:8020/idx", ".lock") == "hdfs://nn:8020/idx/.lock"


# --- one interface for both kinds --------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["local", "s3"])
def test_both_kinds_take_the_same_calls_from_task_files_to_commit(tmp_path, kind, request):
    """What the Spark build does, through the interface alone: tasks write into attempt directories,
    the driver finds them by size, commits (the task directories go), and a reader sees the manifest."""
    out = tmp_path / "out"
    target = str(out) if kind == "local" else f"s3://{request.getfixturevalue('s3_server').new_bucket()}/out"
    dest = open_output(target)
    assert isinstance(dest, LocalOutput if kind == "local" else RemoteOutput)
    with dest.lock():
        staging = dest.new_staging()
        task = TaskFiles(staging.uri, "_tasks/p00000-t1-x")
        files = staged_files(lambda n, d: open(os.path.join(task.local, n), "wb").write(d), "b1")
        task.publish([f.name for f in files])
        task.close()
        sources = {f.name: f"{staging.path}/_tasks/p00000-t1-x/{f.name}" for f in files}
        assert {n: dest.file_size(p) for n, p in sources.items()} == {f.name: len(f"b1:{f.name}") for f in files}
        assert dest.file_size(f"{staging.path}/_tasks/none") is None
        manifest = dest.commit(staging, files, {"version": 1}, UTC, sources=sources)
    assert dest.read_manifest() == manifest == read_manifest(target)
    version = storage.join(target, os.readlink(out / "current") if kind == "local" else dest.current_version())
    # the task directories went before the commit
    assert [e.name for e in storage.listdir(version)] == sorted([INDEX_DIR, MANIFEST])
    assert [e.name for e in storage.listdir(storage.join(version, INDEX_DIR))] == \
        sorted(f["name"] for f in manifest["files"])
    for f in manifest["files"]:
        assert storage.read_bytes(storage.join(version, INDEX_DIR, f["name"])).startswith(b"b1:")


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_failed_task_removes_what_it_wrote(tmp_path, kind, request):
    out = tmp_path / "out"
    target = str(out) if kind == "local" else f"s3://{request.getfixturevalue('s3_server').new_bucket()}/out"
    dest = open_output(target)
    staging = dest.new_staging()
    task = TaskFiles(staging.uri, "_tasks/p00001-t2-y")
    open(os.path.join(task.local, "f"), "wb").write(b"x")
    task.publish(["f"])
    assert storage.stat(storage.join(staging.uri, "_tasks", "p00001-t2-y", "f")) is not None
    task.discard()
    assert storage.stat(storage.join(staging.uri, "_tasks", "p00001-t2-y")) is None
    assert not os.path.exists(task.local)
    dest.discard(staging)
    assert storage.stat(staging.uri) is None

