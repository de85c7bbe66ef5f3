"""Opening the Parquet data files a manifest lists, with errors that name the file.

Files are opened by URI through pyarrow's filesystems (local paths, ``file://``, ``s3://``,
``gs://``…), so the loader's readers need no catalog: a Ray worker reads what the manifest says.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakehouse.errors import DataFileError

_LOCAL = pafs.LocalFileSystem()


@functools.lru_cache(maxsize=16)
def _filesystem(scheme_and_authority: str) -> pafs.FileSystem:
    fs, _ = pafs.FileSystem.from_uri(scheme_and_authority + "/")
    return fs


def split_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem (one per scheme and bucket) and the path inside it."""
    if "://" not in uri:
        return _LOCAL, uri
    scheme, rest = uri.split("://", 1)
    if scheme == "file":
        return _LOCAL, pafs.FileSystem.from_uri(uri)[1]  # pyarrow undoes the percent-encoding
    return _filesystem(f"{scheme}://{rest.split('/', 1)[0]}"), rest


def open_parquet(uri: str, label: str) -> pq.ParquetFile:
    """A Parquet file opened for reading; ``label`` says whose file it is in errors."""
    fs, path = split_uri(uri)
    try:
        return pq.ParquetFile(fs.open_input_file(path))
    except FileNotFoundError as exc:
        raise DataFileError(
            f"{label}: data file {uri} is missing — its snapshot may have been expired or the files moved; "
            "pin the mixture again from a live snapshot"
        ) from exc
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) for a corrupt file
        raise DataFileError(f"{label}: cannot read data file {uri}: {exc}") from exc


def missing_files(uris: Sequence[str]) -> list[str]:
    """The URIs among ``uris`` that do not exist as files (one listing call per filesystem)."""
    by_fs: dict[int, tuple[pafs.FileSystem, list[tuple[str, str]]]] = {}
    for uri in uris:
        fs, path = split_uri(uri)
        by_fs.setdefault(id(fs), (fs, []))[1].append((uri, path))
    missing = []
    for fs, entries in by_fs.values():
        infos = fs.get_file_info([path for _, path in entries])
        missing.extend(uri for (uri, _), info in zip(entries, infos, strict=True) if info.type != pafs.FileType.File)
    return missing
