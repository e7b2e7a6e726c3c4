"""The project's typed errors. Each names where the problem is; all pickle across Spark workers."""
from __future__ import annotations


class RocketIdxError(Exception):
    """Base class: anything rocketidx raises on purpose."""


class ConfigError(RocketIdxError):
    """A bad option or setting: names the option and the value."""

    def __init__(self, option: str, value: object, reason: str) -> None:
        super().__init__(option, value, reason)
        self.option, self.value, self.reason = option, value, reason

    def __str__(self) -> str:
        return f"{self.option}={self.value!r}: {self.reason}"


class StoreLayoutError(RocketIdxError):
    """A CommitLog or index directory that is not laid out as RocketMQ lays it out."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class CorruptRecordError(RocketIdxError):
    """A record or file that cannot be read as the format says, at a byte offset of a file."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(path, offset, reason)
        self.path, self.offset, self.reason = path, offset, reason

    def __str__(self) -> str:
        return f"{self.path} @ byte {self.offset}: {self.reason}"


class CorruptIndexError(CorruptRecordError):
    """An IndexFile whose size, header or links are inconsistent."""


class TopicNameError(CorruptRecordError):
    """A record whose topic cannot be a ConsumeQueue directory name (empty, ``.``, ``..``, holding ``/`` or
    NUL, over 255 bytes): nothing is written for it, let alone outside the output."""

    def __init__(self, path: str, offset: int, topic: str, why: str) -> None:
        RocketIdxError.__init__(self, path, offset, topic, why)
        self.path, self.offset, self.topic, self.why = path, offset, topic, why
        self.reason = f"topic {topic[:80]!r} cannot be a ConsumeQueue directory name: {why}"


class StoreLockedError(RocketIdxError):
    """A broker store whose lock file is held by a running broker, or an output another job holds."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class UnsafeOutputError(RocketIdxError):
    """An output a command refuses to write: inside a broker's store, a directory that is not an output,
    or a committed build of another kind that only ``--overwrite`` may replace."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class EmptySelectionError(RocketIdxError):
    """A build whose offset or time range selected no message: nothing is committed, so an earlier
    output at the same place stays as it was."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class IndexLogMismatchError(RocketIdxError):
    """An index given with a CommitLog it was not built from (its entries point at another log's messages)."""

    def __init__(self, index: str, commitlog: str, reason: str) -> None:
        super().__init__(index, commitlog, reason)
        self.index, self.commitlog, self.reason = index, commitlog, reason

    def __str__(self) -> str:
        return f"{self.index}: the index was not built from the CommitLog {self.commitlog}: {self.reason}"
