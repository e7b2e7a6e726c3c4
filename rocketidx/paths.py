"""Local paths and URIs: which is which, and how to join them.

In: a path string. Out: whether pyarrow.fs must open it (a URI: ``hdfs://``, ``s3://``, ``file://``), and
URIs with path parts appended.
Stays true: a path without a scheme is a local path, opened with the ``os`` calls; everything with a
scheme goes through ``pyarrow.fs.FileSystem.from_uri``, so credentials and endpoints come from the
environment the ecosystem's way.
"""
from __future__ import annotations

import os
import re
from urllib.parse import urlsplit, urlunsplit

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(path: str | os.PathLike) -> bool:
    """A path with a scheme (``hdfs://``, ``s3://``, ``file://``): opened through pyarrow.fs."""
    return isinstance(path, str) and _SCHEME.match(path) is not None


def join_uri(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended to its path; a query (``?region=...``) stays at the end."""
    u = urlsplit(uri)
    return urlunsplit(u._replace(path="/".join([u.path.rstrip("/"), *parts])))
