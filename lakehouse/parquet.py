"""Files by URI on a local disk or an object store, and opening the Parquet data files of a manifest.

One filesystem abstraction serves every reader and writer of the warehouse: pyarrow's
filesystems, configured by pyiceberg's FileIO properties (``s3.endpoint``,
``s3.access-key-id``, ``s3.region``, ``gcs.*``…; pyiceberg's ``PyArrowFileIO`` builds them), so
a path is reached the way pyiceberg reaches the same table. Local paths, ``file://``, ``s3://``,
``gs://``… all work, with no Hadoop jar. The loader's readers need no catalog: a Ray worker reads
what the manifest says, with the properties its own pyiceberg configuration gives the
manifest's catalog (``lakehouse.catalog.file_io_properties``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakehouse.errors import DataFileError

_LOCAL = pafs.LocalFileSystem()
_NONE: Mapping[str, str] = {}


@functools.lru_cache(maxsize=32)
def _filesystem(scheme: str, netloc: str, properties: frozenset[tuple[str, str]]) -> pafs.FileSystem:
    from pyiceberg.io.pyarrow import PyArrowFileIO  # ~0.5 s to import: only for object stores

    return PyArrowFileIO(dict(properties)).fs_by_scheme(scheme, netloc)


def split_uri(uri: str, properties: Mapping[str, str] = _NONE) -> tuple[pafs.FileSystem, str]:
    """The filesystem (one per scheme, bucket and configuration) and the path inside it.

    ``properties`` are pyiceberg FileIO properties (a table's ``table.io.properties``); local
    paths ignore them."""
    if "://" not in uri:
        return _LOCAL, uri
    scheme, rest = uri.split("://", 1)
    if scheme == "file":
        return _LOCAL, pafs.FileSystem.from_uri(uri)[1]  # pyarrow undoes the percent-encoding
    netloc = rest.split("/", 1)[0]
    return _filesystem(scheme, netloc, frozenset(properties.items())), rest


# Catalog properties that are not about reaching files: the connection string (which may hold a
# database password) stays off readers that only open data files.
_NOT_FILE_IO = ("uri", "type", "warehouse", "py-catalog-impl")


def _configured() -> bool:
    """Whether pyiceberg has any configuration to read: a ``PYICEBERG_*`` variable or a
    ``.pyiceberg.yaml`` where pyiceberg's ``Config`` looks (``$PYICEBERG_HOME``, home, cwd)."""
    if any(k.upper().startswith("PYICEBERG_") for k in os.environ):
        return True
    folders = [os.environ.get("PYICEBERG_HOME"), os.path.expanduser("~"), os.getcwd()]
    return any(f and os.path.isfile(os.path.join(f, ".pyiceberg.yaml")) for f in folders)


def file_io_properties(catalog_name: str | None) -> dict[str, str]:
    """The FileIO properties (``s3.endpoint``, ``s3.access-key-id``, ``gcs.*``…) pyiceberg's
    configuration gives the catalog named ``catalog_name``, read afresh (``~/.pyiceberg.yaml`` and
    this process's ``PYICEBERG_CATALOG__<NAME>__*`` variables), without connecting to it.

    What a reader holding only a manifest needs to open its data files: the manifest names its
    catalog but records no credential, so each reader (a Ray worker, a training rank) finds the
    store's settings in its own configuration. Empty for a name that is not configured, such as
    the embedded catalog's (local files need none)."""
    if not catalog_name or not _configured():
        return {}
    from pyiceberg.utils.config import Config  # ~0.5 s to import (pydantic): only when configured

    config = Config().get_catalog_config(catalog_name) or {}
    return {k: str(v) for k, v in config.items() if k not in _NOT_FILE_IO and not isinstance(v, dict)}


def store_properties(io_properties: Mapping[str, str]) -> dict[str, str]:
    """A table's FileIO properties (``table.io.properties``) without the catalog's connection
    string (``uri``, which may hold a database password): what a reader or writer of its files
    needs, and all that may travel to Spark tasks."""
    return {k: v for k, v in io_properties.items() if k != "uri"}


def open_parquet(uri: str, label: str, properties: Mapping[str, str] = _NONE) -> pq.ParquetFile:
    """A Parquet file opened for reading; ``label`` says whose file it is in errors."""
    fs, path = split_uri(uri, properties)
    try:
        return pq.ParquetFile(fs.open_input_file(path))
    except FileNotFoundError as exc:
        raise DataFileError(
            f"{label}: data file {uri} is missing — its snapshot may have been expired or the files moved; "
            "pin the mixture again from a live snapshot"
        ) from exc
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) for a corrupt file
        raise DataFileError(f"{label}: cannot read data file {uri}: {exc}") from exc


def read_columns(
    uri: str, columns: Sequence[str], properties: Mapping[str, str] = _NONE, filters: list | None = None
) -> pa.Table:
    """``columns`` of the Parquet file ``uri``, the rows ``filters`` keeps (pyarrow's DNF form)."""
    fs, path = split_uri(uri, properties)
    return pq.read_table(path, filesystem=fs, columns=list(columns), filters=filters)


LIST_FOLDER_AT = 64


def missing_files(uris: Sequence[str], properties: Mapping[str, str] = _NONE) -> list[str]:
    """The URIs among ``uris`` that do not exist as files.

    A folder holding ``LIST_FOLDER_AT`` or more of them is listed once (an object store pages a
    listing 1,000 names a request) rather than asked about each file: a snapshot of thousands of
    small files is checked in a few requests. What a listing does not show is asked about itself."""
    by_folder: dict[str, list[str]] = {}
    for uri in uris:
        by_folder.setdefault(uri.rpartition("/")[0], []).append(uri)
    unlisted: dict[int, tuple[pafs.FileSystem, list[tuple[str, str]]]] = {}
    for folder_uri, group in by_folder.items():
        if len(group) >= LIST_FOLDER_AT and folder_uri and not folder_uri.endswith("/"):
            # The folder is resolved once, not each of its files (10,000 URIs took 0.1 s).
            fs, folder = split_uri(folder_uri, properties)
            present = _files_in(fs, folder)
            paths = [(fs, _path_in(folder, uri, properties), uri) for uri in group]
            paths = [(fs, path, uri) for fs, path, uri in paths if path not in present]
        else:
            paths = [(*split_uri(uri, properties), uri) for uri in group]
        for fs, path, uri in paths:
            unlisted.setdefault(id(fs), (fs, []))[1].append((uri, path))
    missing = []
    for fs, entries in unlisted.values():
        infos = fs.get_file_info([path for _, path in entries])
        missing.extend(uri for (uri, _), info in zip(entries, infos, strict=True) if info.type != pafs.FileType.File)
    order = {uri: i for i, uri in enumerate(uris)}
    return sorted(missing, key=order.__getitem__)


def _files_in(fs: pafs.FileSystem, folder: str) -> set[str]:
    """The paths of the files in ``folder``. A local folder is read with ``os.scandir``: pyarrow's
    listing builds an object per entry (0.07 s for 10,000 files, most of checking them)."""
    if isinstance(fs, pafs.LocalFileSystem):
        try:
            with os.scandir(folder) as entries:
                return {f"{folder}/{entry.name}" for entry in entries if entry.is_file()}
        except (FileNotFoundError, NotADirectoryError):
            return set()
    listing = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    return {info.path for info in listing if info.type == pafs.FileType.File}


def _path_in(folder: str, uri: str, properties: Mapping[str, str]) -> str:
    """The path of ``uri``, a file of ``folder`` (a path); a name with a percent-escape is left
    to ``split_uri``, which undoes it as pyarrow does for ``file://``."""
    name = uri.rpartition("/")[2]
    return split_uri(uri, properties)[1] if "%" in name else f"{folder}/{name}"
