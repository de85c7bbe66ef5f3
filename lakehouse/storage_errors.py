"""What a failed file operation means, said so that a user can act on it.

A full disk, a read-only or forbidden folder, or a path too long reach the top of a command as an
``OSError`` (from Python, pyarrow or torch), as an SQLite error inside SQLAlchemy's, or only as
text: a Spark task's Python traceback comes back to the driver as a message. ``storage_error``
recognises each and says what to do; anything else is left to surface as the bug it is.
``catalog_database_error`` does the same for a SQL catalog's database failing mid-command.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator

from sqlalchemy.exc import DBAPIError

from lakehouse.errors import CatalogError, StorageError
from lakehouse.redact import redact

_ERRNO_TEXT = re.compile(r"\[errno (\d+)\]", re.IGNORECASE)
# SQLite reports these in words, never with an errno.
_SQLITE_TEXT = {"database or disk is full": errno.ENOSPC, "attempt to write a readonly database": errno.EROFS}

_FULL = (
    "no space left on the device{at}: free some space (or raise the quota) and run the command again. "
    "Nothing half-written was published: files a failed job staged are removed by `factory gc`, "
    "a checkpoint without COMPLETE is ignored"
)
_ELSEWHERE = "point FACTORY_HOME (or the catalog's warehouse, the run's directory, or the command's --output) at a place it can write"
_MESSAGES = {
    errno.ENOSPC: _FULL,
    errno.EDQUOT: _FULL,
    errno.EROFS: "read-only file system{at}: " + _ELSEWHERE,
    errno.EACCES: "permission denied{at}: grant the user running this command access, or " + _ELSEWHERE,
    errno.EPERM: "operation not permitted{at}: grant the user running this command access, or " + _ELSEWHERE,
    errno.EBUSY: "a folder is busy{at}, as a mount point is, and cannot be renamed or replaced: give a path inside it",
    errno.ENOTDIR: "a path runs through a file where a folder is needed{at}: move that file away, or " + _ELSEWHERE,
    errno.ENAMETOOLONG: "a path is too long for the file system{at}: use shorter table names, or a warehouse "
    "or run directory with a shorter path",
}


# An object store's failures reach us as pyarrow's OSError without an errno, in AWS SDK words
# (pyarrow's S3 filesystem; GCS and MinIO answer through the same SDK or the same words).
_STORE_TEXT = {
    re.compile(r"AWS Error NO_SUCH_BUCKET|Bucket '[^']*' not found"): "the object store has no such bucket: "
    "create it, or point the catalog's `warehouse` at a bucket that exists",
    re.compile(r"AWS Error (?:ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|\[code 15\])"): "the "
    "object store refused the catalog's keys: check `s3.access-key-id` and `s3.secret-access-key` (or the role), "
    "and that they may read, write, delete and list the warehouse's prefix",
    re.compile(r"AWS Error NETWORK_CONNECTION"): "cannot reach the object store: check the catalog's "
    "`s3.endpoint` (and `s3.region`) and the network; nothing was committed",
}


def storage_error(exc: BaseException) -> StorageError | None:
    """The StorageError that ``exc`` (or an exception it wraps) amounts to, or None."""
    for seen in _chain(exc):
        if isinstance(seen, OSError) and seen.errno in _MESSAGES:
            return _error(seen.errno, seen.filename2 or seen.filename)  # a rename: its destination
    for text in chain_texts(exc):
        for pattern, message in _STORE_TEXT.items():
            if pattern.search(text):
                return StorageError(message)
        for found in _ERRNO_TEXT.finditer(text):
            if int(found.group(1)) in _MESSAGES:
                return _error(int(found.group(1)), None)
        for words, code in _SQLITE_TEXT.items():
            if words in text:
                return _error(code, "the catalog's database")
    return None


def catalog_database_error(exc: BaseException) -> CatalogError | None:
    """A SQL catalog's database failing once the catalog was loaded (it went down, or its user may
    not read the catalog's tables): the driver's first line, never SQLAlchemy's page of SQL."""
    for seen in _chain(exc):
        if isinstance(seen, DBAPIError):
            said = str(seen.orig).strip().splitlines()[0] if seen.orig is not None else type(seen).__name__
            return CatalogError(
                f"the catalog's database failed: {redact(said)}. Check that it is up and that the catalog's user may "
                "read and write its tables (iceberg_tables, iceberg_namespace_properties), then run the same command "
                "again: a run that committed part of its work finishes it"
            )
    return None


def _error(code: int, where: object) -> StorageError:
    at = f" ({where})" if where else ""
    return StorageError(_MESSAGES[code].format(at=at))


def chain_texts(exc: BaseException) -> Iterator[str]:
    """The message of ``exc`` and of each exception it wraps, skipping any that cannot say it
    (py4j asks the JVM for a Java error's message, and the JVM may be gone)."""
    for seen in _chain(exc):
        try:
            yield str(seen)
        except Exception:
            continue


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__
