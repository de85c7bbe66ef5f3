"""Failed file operations, however they arrive, become one clear StorageError (or stay what they are)."""

from __future__ import annotations

import errno

import pytest

from lakehouse.storage_errors import storage_error


def raised_from(cause: BaseException, outer: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise outer from exc
    except BaseException as exc:
        return exc


@pytest.mark.parametrize(
    "exc, says",
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/data/x.parquet"),
            "no space left on the device (/data/x.parquet)",
        ),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "raise the quota"),
        (OSError(errno.EROFS, "Read-only file system", "/home"), "read-only file system (/home)"),
        (PermissionError(errno.EACCES, "Permission denied", "/w"), "permission denied (/w)"),
        (OSError(errno.ENAMETOOLONG, "File name too long"), "shorter table names"),
        # factory export onto a mount point (a container's volume): its folder is renamed into place.
        (OSError(errno.EBUSY, "Device or resource busy", ".vol.x.partial", None, "vol"), "busy (vol), as a mount"),
        (NotADirectoryError(errno.ENOTDIR, "Not a directory", "/w/f/wh"), "a file where a folder is needed (/w/f/wh)"),
        # A Spark task's error reaches the driver as text; SQLite's in words, wrapped by SQLAlchemy.
        (RuntimeError("PythonException: OSError: [Errno 28] Error writing bytes to file"), "no space left"),
        (raised_from(OSError("x"), RuntimeError("(sqlite3.OperationalError) database or disk is full")), "no space"),
        (RuntimeError("(sqlite3.OperationalError) attempt to write a readonly database"), "read-only"),
        (raised_from(OSError(errno.ENOSPC, "full"), RuntimeError("CheckpointException ranks: [0]")), "no space"),
        # pyarrow's S3 filesystem, as it answered moto's server (no errno).
        (OSError("Bucket 'nobucket' not found. To create buckets, enable the allow_bucket_creation option."), "bucket"),
        (
            OSError(
                "When initiating multiple part upload for key 'wh/x/_lease' in bucket 'nobucket': AWS Error "
                "NO_SUCH_BUCKET during CreateMultipartUpload operation: The specified bucket does not exist"
            ),
            "no such bucket",
        ),
        (
            OSError(
                "When getting information for key 'x' in bucket 'b': AWS Error NETWORK_CONNECTION during HeadObject "
                "operation: curlCode: 7, Could not connect to server"
            ),
            "s3.endpoint",
        ),
        (
            OSError("When reading information for key 'k' in bucket 'b': AWS Error ACCESS_DENIED during"),
            "s3.access-key-id",
        ),
        (
            RuntimeError("PythonException: OSError: ... AWS Error [code 15]: Access Denied"),
            "refused the catalog's keys",
        ),
    ],
)
def test_each_form_is_recognised_and_says_what_to_do(exc, says):
    error = storage_error(exc)
    assert error is not None and says in str(error)


def test_other_errors_are_left_alone():
    assert storage_error(FileNotFoundError(errno.ENOENT, "No such file", "/x")) is None
    assert storage_error(ValueError("[Errno 2] something")) is None
    assert storage_error(RuntimeError("boom")) is None
