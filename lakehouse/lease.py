"""Leases on staging folders: how ``factory gc`` tells a live run's files from a dead run's.

A job holds a lease on each attempt folder it stages into
(``<table>/data/runs/<run-id>/<attempt-id>/``): the file ``_lease`` there, written before the
first staged file, rewritten every ``REFRESH`` by one background thread per process, and
removed when that table's commit has landed. gc leaves a folder alone while its lease was
written within ``TIMEOUT``; a lease older than that belongs to a dead process. A process that
went longer than ``TRUSTED`` without renewing (a stall, a lost connection to the store) may have
been taken for dead, and then refuses to commit. Written through pyarrow's filesystems, so it
works on local disks and object stores alike (docs/architecture.md, "The commit protocol").
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pyarrow.fs as pafs

from lakehouse.errors import CommitError
from lakehouse.parquet import split_uri

log = logging.getLogger(__name__)

LEASE_FILE = "_lease"
REFRESH = timedelta(seconds=10)
TIMEOUT = timedelta(minutes=10)
# Half the timeout: a commit that starts with a lease renewed this recently lands long before
# gc could take the run for dead.
TRUSTED = TIMEOUT / 2

_clock = time.monotonic  # replaced by tests to pretend time has passed


@dataclass
class _Lease:
    folder: str
    # The table's FileIO properties (how to reach its store; they may hold keys: kept out of repr).
    properties: Mapping[str, str] = field(repr=False)
    renewed: float = 0.0
    lost: str | None = None

    @property
    def uri(self) -> str:
        return f"{self.folder}/{LEASE_FILE}"

    def write(self) -> None:
        fs, path = split_uri(self.uri, self.properties)
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        body = {"host": socket.gethostname(), "pid": os.getpid(), "written": datetime.now(UTC).isoformat()}
        with fs.open_output_stream(path) as out:
            out.write(json.dumps(body).encode())
        self.renewed = _clock()

    def renew(self) -> None:
        """Rewrite the lease, unless it was lost: removed by gc, or not renewed for too long."""
        if self.lost is None and _clock() - self.renewed > TRUSTED.total_seconds():
            self.lost = f"not renewed for {_clock() - self.renewed:.0f}s (a run is trusted for {TRUSTED})"
        fs, path = split_uri(self.uri, self.properties)
        if self.lost is None and fs.get_file_info(path).type != pafs.FileType.File:
            self.lost = f"{self.uri} was removed, as `factory gc` does for a run it takes for dead"
        if self.lost is None:
            self.write()


_held: dict[str, _Lease] = {}
_lock = threading.Lock()
_keeper: threading.Thread | None = None


def hold(folder: str, properties: Mapping[str, str] = MappingProxyType({})) -> None:
    """Take the lease on ``folder`` (a URI; ``properties``: the FileIO properties that reach it) for
    this process, renewed until ``release``; idempotent."""
    global _keeper
    folder = folder.rstrip("/")
    with _lock:
        if folder in _held:
            return
        lease = _Lease(folder, dict(properties))
        lease.write()
        _held[folder] = lease
        if _keeper is None:
            _keeper = threading.Thread(target=_renew_forever, name="staging-lease", daemon=True)
            _keeper.start()


def check(folder: str) -> None:
    """Raise ``CommitError`` if this process's lease on ``folder`` was lost (a lease not held passes)."""
    folder = folder.rstrip("/")
    with _lock:
        lease = _held.get(folder)
        if lease is None:
            return
        lease.renew()
        if lease.lost is not None:
            raise CommitError(
                f"the staged files in {folder} may have been removed by `factory gc`: this run's lease "
                f"was lost ({lease.lost}). Nothing was committed; run the job again with the same --run-id."
            )


def release(folder: str) -> None:
    """Stop renewing the lease on ``folder`` and remove it (its files are committed: gc keeps them)."""
    with _lock:
        lease = _held.pop(folder.rstrip("/"), None)
    if lease is not None:
        fs, path = split_uri(lease.uri, lease.properties)
        with contextlib.suppress(FileNotFoundError):  # removed already, by gc or by hand
            fs.delete_file(path)


def is_live(info: pafs.FileInfo, now: datetime, timeout: timedelta = TIMEOUT) -> bool:
    """Whether a lease file, as gc lists it, was renewed within ``timeout`` of ``now``."""
    return info.type == pafs.FileType.File and info.mtime is not None and now - info.mtime < timeout


def _renew_forever() -> None:
    while True:
        time.sleep(REFRESH.total_seconds())
        with _lock:
            leases = list(_held.values())
        for lease in leases:
            try:
                with _lock:
                    if _held.get(lease.folder) is lease:  # not released meanwhile
                        lease.renew()
            except Exception as exc:  # a store that does not answer: try again next round, keep the thread
                log.warning("could not renew the staging lease %s: %s", lease.uri, exc)
