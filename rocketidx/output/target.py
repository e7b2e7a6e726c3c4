"""Local or remote: which output a path names, where a task writes its files, and where an in-process
build of a URI builds.

In: an output path or URI; a staging version's location and a task directory name. Out: a
:class:`rocketidx.output.local.LocalOutput` or :class:`rocketidx.output.remote.RemoteOutput`
(:func:`open_output`), a task's :class:`TaskFiles`, the committed manifest (:func:`open_manifest`).
Stays true: a file a task writes becomes visible at its location only once closed (uploaded whole to a
URI), and an in-process build of a URI commits there only when it succeeded (:func:`built_here`).
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from contextlib import contextmanager

from rocketidx.output.local import LocalOutput
from rocketidx.output.manifest import Manifest
from rocketidx.output.remote import RemoteOutput
from rocketidx.storage import is_uri
import rocketidx.storage as storage

log = logging.getLogger(__name__)


def open_manifest(out: str | os.PathLike) -> Manifest | None:
    """The committed :class:`Manifest` of a local output, or of a URI's (through ``OUT/CURRENT``); None
    if there is none."""
    from rocketidx.output.open import _pinned
    out = storage.normalize(out)
    if is_uri(out):
        return RemoteOutput.from_uri(out).manifest()
    return Manifest.read(_pinned(out))


def read_manifest(out: str | os.PathLike) -> dict | None:
    """:func:`open_manifest` as plain JSON values (what ``build_index`` returned for it)."""
    m = open_manifest(out)
    return None if m is None else m.to_dict()


def open_output(out: str | os.PathLike) -> "LocalOutput | RemoteOutput":
    """The build output at ``out``: a local path (or ``file://`` URI), or any URI pyarrow.fs opens."""
    out = storage.normalize(out)
    return RemoteOutput.from_uri(out) if is_uri(out) else LocalOutput(out)


@contextmanager
def built_here(out: str | os.PathLike):
    """Where an in-process build writes ``out``: ``out`` itself when it is local; for a URI, a local
    scratch output, whose committed version is published to ``out`` (:meth:`RemoteOutput.publish`) when
    the build inside the block succeeds. The remote output's lock is held throughout, so a build to a URI
    is refused at once when another one is writing it, and a failed or killed build leaves the previous
    remote output as it was (at worst a staged version no pointer names, which the next build removes)."""
    out = storage.normalize(out)
    if not is_uri(out):
        yield out
        return
    remote = RemoteOutput.from_uri(out)
    with remote.lock():
        scratch = tempfile.mkdtemp(prefix="rocketidx-out-", dir=scratch_dir())
        try:
            yield scratch
            remote.publish(scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def scratch_dir() -> str:
    """Local scratch space: the first of ``SPARK_LOCAL_DIRS`` (a task's), else the system temp directory."""
    return (os.environ.get("SPARK_LOCAL_DIRS") or tempfile.gettempdir()).split(",")[0]


class TaskFiles:
    """Where one task attempt writes its files under a version directory (``location``: its path or URI).

    ``local`` is a directory on this machine to build the files in: the version directory itself when it
    is a local (or mounted) path, else a scratch directory whose files :meth:`publish` uploads, because
    HDFS and object stores cannot update a file in place.
    """

    def __init__(self, location: str, task_dir: str):
        self.task_dir = task_dir  # relative to the version directory
        location = storage.normalize(location)
        self.remote = RemoteOutput.from_uri(location) if is_uri(location) else None
        if self.remote is None:
            self.local = os.path.join(location, task_dir)
            os.makedirs(self.local)
            return
        self.target = self.remote.path(task_dir)
        self.remote.fs.create_dir(self.target, recursive=True)
        self.local = tempfile.mkdtemp(prefix="rocketidx-write-", dir=scratch_dir())

    def publish(self, names: list[str]) -> None:
        """Make the closed files ``names`` (in :attr:`local`) visible at the task's location."""
        if self.remote is None:
            return
        for name in names:
            src = os.path.join(self.local, name)
            with open(src, "rb") as f, self.remote.fs.open_output_stream(f"{self.target}/{name}") as out:
                shutil.copyfileobj(f, out, 8 * 1024**2)
            os.unlink(src)

    def discard(self) -> None:
        """Remove what this attempt wrote (it failed); a failure to remove is logged, not raised, as the
        attempt's own error is the one to report."""
        shutil.rmtree(self.local, ignore_errors=True)
        if self.remote is not None:
            try:
                self.remote.remove(self.target)
            except OSError as e:
                log.warning("could not remove the failed task's files %s: %s", self.target, e)

    def close(self) -> None:
        if self.remote is not None:
            shutil.rmtree(self.local, ignore_errors=True)
