"""Where the UI finds things: the catalog, and run folders and manifests under its roots.

Runs and manifests are plain files, not catalog entries, so the UI looks for them under the
folders it was given (default ``$FACTORY_HOME``): a run is a folder holding ``metrics.jsonl`` or
``checkpoints/``, a manifest a ``*manifest*.json`` file, or one a run or checkpoint names. A run is
addressed by its path relative to its root; a manifest by its fingerprint. Nothing outside the
discovered set can be named in a URL, so a request cannot read an arbitrary file.

A walk is kept per folder and used again while none of the folders it walked has changed (a new
run folder, metrics file, checkpoints folder or manifest changes its folder's modification time,
so it shows on the next request); a manifest, or a run's resolved config, is read once per its
path, size and modification time (ui/cache.py).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cachetools import LRUCache
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from lakehouse.catalog import load_catalog
from lakehouse.errors import InputError
from mixtures.manifest import Manifest
from trainer.checkpoint_paths import complete_checkpoints
from trainer.lineage import lineage_in
from ui.cache import CachedCatalog, file_key, memo

# Folders never walked: the warehouse holds only table files, and can be huge.
_SKIP = {"warehouse", "tensorboard", ".git", "__pycache__"}
_MAX_DEPTH = 5

EVALS_TABLE = ("evals", "results")
TRIALS_TABLE = ("experiments", "trials")


@dataclass(frozen=True)
class RunDir:
    key: str  # path relative to its root: the URL's name for it
    path: Path


@dataclass(frozen=True)
class ManifestFile:
    fingerprint: str
    path: Path
    manifest: Manifest


class NotFound(InputError):
    """A page names a run, manifest, checkpoint or document that does not exist (HTTP 404)."""


class BadRequest(InputError):
    """A page was asked for with a parameter it cannot use (HTTP 400)."""


class Sources:
    def __init__(self, catalog_name: str | None, roots: list[Path]) -> None:
        self.catalog_name = catalog_name
        resolved = {r.resolve() for r in roots}
        # A root inside another would list each of its runs twice, under two keys.
        self.roots = sorted(r for r in resolved if not any(o != r and r.is_relative_to(o) for o in resolved))
        self._catalog: CachedCatalog | None = None

    @property
    def catalog(self) -> CachedCatalog:
        if self._catalog is None:
            self._catalog = CachedCatalog(load_catalog(self.catalog_name))
        return self._catalog

    def optional_table(self, identifier: tuple[str, ...]) -> Table | None:
        """A table another part of the factory may or may not have made (evals, sweeps)."""
        try:
            return self.catalog.load_table(identifier)
        except NoSuchTableError:
            return None

    def runs(self) -> list[RunDir]:
        found = [
            RunDir(folder.relative_to(root).as_posix() or ".", folder)
            for root in self.roots
            for folder in _scan(root).runs
        ]
        return sorted(found, key=lambda r: r.key)

    def run(self, key: str) -> RunDir:
        for run in self.runs():
            if run.key == key:
                return run
        raise NotFound(f"no training run {key!r} under {', '.join(map(str, self.roots))}; the runs page lists them")

    def manifests(self) -> list[ManifestFile]:
        paths = {path for root in self.roots for path in _scan(root).manifests}
        for run in self.runs():
            key = file_key(run.path / "config.resolved.json")
            named = _named_manifest(*key) if key else None
            if named:
                paths.add(named)
        found = {}
        for path in sorted(paths):
            key = file_key(path)
            manifest = _manifest(*key) if key else None
            if manifest is not None:
                found.setdefault(manifest.fingerprint, ManifestFile(manifest.fingerprint, path, manifest))
        return list(found.values())

    def manifest(self, fingerprint: str) -> ManifestFile:
        for found in self.manifests():
            if found.fingerprint == fingerprint:
                return found
        raise NotFound(f"no manifest with fingerprint {fingerprint!r} under the UI's folders")


def run_manifest_fingerprint(run: RunDir) -> str | None:
    """The fingerprint of the manifest a run trained on, from its newest checkpoint's lineage (a
    damaged one, which its checkpoint's page names, is passed over)."""
    for step_dir in reversed(checkpoint_dirs(run)):
        try:
            return lineage_in(step_dir / "lineage.json")["manifest"]["fingerprint"]
        except InputError:
            continue
    return None


@memo(256)
def _manifest(path: str, _size: int, _mtime_ns: int) -> Manifest | None:
    try:
        return Manifest.load(path)
    except Exception:  # not a manifest, or a broken one: not listed
        return None


@memo(256)
def _named_manifest(path: str, _size: int, _mtime_ns: int) -> Path | None:
    data = read_json(Path(path)).get("data")  # a hand-edited config's "data" may be no object
    named = data.get("manifest") if isinstance(data, dict) else None
    return Path(named).resolve() if isinstance(named, str) and named else None


def is_number(text: str) -> bool:
    """Whether ``text`` is a whole number ``int`` reads: ``"²"`` is a digit to ``str.isdigit``, not to ``int``."""
    return text.isascii() and text.isdigit()


def checkpoint_dirs(run: RunDir) -> list[Path]:
    """The run's complete checkpoints, oldest first: those training finds (torch-free)."""
    return [path for _, path in complete_checkpoints(run.path)]


def read_json(path: Path) -> dict:
    """A JSON object from a file; {} when it is missing, cut short or not an object."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class _Scan:
    folders: tuple[tuple[Path, int | None], ...]  # every folder walked, with its modification time
    runs: tuple[Path, ...]
    manifests: tuple[Path, ...]
    settled: bool  # no folder had changed in the second before the walk


_SCANS: LRUCache = LRUCache(16)
_SCANS_LOCK = threading.Lock()


def _scan(root: Path) -> _Scan:
    """The run folders and manifest files under ``root``: the last walk's, while every folder it
    walked has the modification time it had, else a new walk."""
    with _SCANS_LOCK:
        last = _SCANS.get(root)
    if last is not None and last.settled and all(_mtime(folder) == mtime for folder, mtime in last.folders):
        return last
    began = time.time_ns()
    folders, runs, manifests = [], [], []
    for folder in _walk(root):
        folders.append((folder, _mtime(folder)))
        if (folder / "metrics.jsonl").is_file() or (folder / "checkpoints").is_dir():
            runs.append(folder)
        manifests += sorted(p for p in folder.glob("*manifest*.json") if p.is_file())
    # A folder changed within the clock's granularity of the walk could change again unseen by its
    # time (git's "racily clean" entries): such a walk is not used again.
    settled = all(mtime is not None and mtime < began - 1_000_000_000 for _, mtime in folders)
    scan = _Scan(tuple(folders), tuple(runs), tuple(manifests), settled)
    with _SCANS_LOCK:
        _SCANS[root] = scan
    return scan


def _mtime(folder: Path) -> int | None:
    try:
        return folder.stat().st_mtime_ns
    except OSError:
        return None


def _walk(root: Path):
    if not root.is_dir():
        return
    base = len(root.parts)
    for folder, dirs, _files in os.walk(root):
        here = Path(folder)
        yield here
        if len(here.parts) - base >= _MAX_DEPTH or (here / "checkpoints").is_dir():
            dirs[:] = []
        else:
            dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.startswith("."))
