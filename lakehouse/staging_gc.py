"""``factory gc``'s work: removing staged files of runs that never committed (docs/architecture.md,
"The commit protocol", step 5). A file any snapshot of any table references stays, and so does the
staging of a run that still holds its lease (``lease.py``)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from lakehouse import lease
from lakehouse.catalog import list_tables, load_table
from lakehouse.commit import RUNS_DIR, file_key, referenced_keys
from lakehouse.parquet import split_uri
from lakehouse.refs import format_identifier


@dataclass(frozen=True)
class GarbageReport:
    table: str
    removed: list[str]
    kept_recent: int
    kept_live: int = 0  # files of runs whose lease is still being renewed


def collect_garbage(
    catalog: Catalog,
    identifiers: Iterable[tuple[str, ...]],
    *,
    grace: timedelta,
    dry_run: bool = False,
    now: datetime | None = None,
    lease_timeout: timedelta = lease.TIMEOUT,
) -> list[GarbageReport]:
    """Remove staged files of ``identifiers`` that no snapshot of any table in the catalog
    references, that are older than ``grace``, and whose run's lease is not live.

    The staging folders are listed before the catalog is read: a run that commits meanwhile is
    either seen holding its lease or seen committed.
    """
    now = now or datetime.now(UTC)
    identifiers = list(identifiers)
    listings = [_list_staging(load_table(catalog, identifier)) for identifier in identifiers]
    referenced = _referenced_keys_in_catalog(catalog, identifiers)
    return [
        _collect(format_identifier(identifier), listing, referenced, grace, lease_timeout, now, dry_run)
        for identifier, listing in zip(identifiers, listings, strict=True)
    ]


@dataclass(frozen=True)
class _Staging:
    prefix: str  # URI of the table's runs folder
    fs: pafs.FileSystem
    root: str  # its path in fs
    files: list[pafs.FileInfo]


def _list_staging(table: Table) -> _Staging:
    prefix = f"{table.location().rstrip('/')}/{RUNS_DIR}"
    fs, root = split_uri(prefix, table.io.properties)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return _Staging(prefix, fs, root, [i for i in infos if i.type == pafs.FileType.File])


def _collect(
    name: str,
    staging: _Staging,
    referenced: set[str],
    grace: timedelta,
    lease_timeout: timedelta,
    now: datetime,
    dry_run: bool,
) -> GarbageReport:
    fs, root = staging.fs, staging.root

    def attempt_folder(path: str) -> str:  # <root>/<run-id>/<attempt-id>
        return "/".join(path.split("/")[: root.count("/") + 3])

    live = {
        attempt_folder(i.path)
        for i in staging.files
        if posixpath.basename(i.path) == lease.LEASE_FILE and lease.is_live(i, now, lease_timeout)
    }
    doomed: dict[str, list[pafs.FileInfo]] = {}
    recent = kept_live = 0
    for info in staging.files:
        folder = attempt_folder(info.path)
        if folder in live:
            kept_live += posixpath.basename(info.path) != lease.LEASE_FILE
        elif file_key(staging.prefix + info.path[len(root) :]) in referenced:
            continue
        elif info.mtime is not None and now - info.mtime < grace:
            recent += 1
        else:
            doomed.setdefault(folder, []).append(info)
    removed = []
    for folder, infos in doomed.items():
        # A lease written since the listing (whose readdir may have missed it) still protects.
        if lease.is_live(fs.get_file_info(f"{folder}/{lease.LEASE_FILE}"), now, lease_timeout):
            kept_live += sum(posixpath.basename(i.path) != lease.LEASE_FILE for i in infos)
            continue
        for info in infos:
            removed.append(staging.prefix + info.path[len(root) :])
            if not dry_run:
                fs.delete_file(info.path)
    if not dry_run:
        _remove_empty_dirs(fs, root)
    return GarbageReport(name, removed, recent, kept_live)


def _referenced_keys_in_catalog(catalog: Catalog, identifiers: Iterable[tuple[str, ...]]) -> set[str]:
    """Every file any snapshot of any table of the catalog references (all branches and tags)."""
    keys: set[str] = set()
    for identifier in sorted(set(list_tables(catalog)) | set(identifiers)):
        table = load_table(catalog, identifier)
        keys |= referenced_keys(table, table.metadata.snapshots)
    return keys


def _remove_empty_dirs(fs: pafs.FileSystem, root: str) -> None:
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    dirs = sorted((i.path for i in infos if i.type == pafs.FileType.Directory), key=len, reverse=True)
    for path in dirs:
        if not fs.get_file_info(pafs.FileSelector(path)):
            fs.delete_dir(path)
