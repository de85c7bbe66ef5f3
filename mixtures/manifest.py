"""The pinned manifest: everything the loader needs to plan a mixture, and nothing that can move.

``factory mix pin`` writes it; the loader accepts nothing else. It names every component's
snapshot id (never a tag), the exact data files with their record and row-group counts, the
row filter and the held-out split, and a fingerprint over all of that, so a checkpoint's
lineage can say exactly which data a run saw.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from lakehouse.errors import ManifestError
from lakehouse.local_files import write_atomically

FORMAT = "factory-mixture-manifest/1"
# Fields that describe when and by what a manifest was made, not what it contains: two pins of
# the same snapshots have the same fingerprint.
_NOT_FINGERPRINTED = ("fingerprint", "pinned_at", "code_version")


@dataclass(frozen=True)
class DataFile:
    """One Parquet data file of a pinned snapshot."""

    path: str
    """URI of the file, as the snapshot's manifest lists it."""
    record_count: int
    """Rows in the file."""
    row_groups: tuple[int, ...]
    """Rows in each row group, in order (the loader seeks by row group)."""
    text_bytes: int
    """Uncompressed bytes of the ``text`` column (plans read sizes)."""
    file_size: int
    """Size of the file in bytes."""

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ManifestError(f"a file's path must be a non-empty string, got {self.path!r}")
        # Messages are formatted only on failure: a manifest holds a file like this per data file.
        for name in ("record_count", "text_bytes", "file_size"):
            if not _is_count(getattr(self, name)):
                raise ManifestError(f"{self.path}: {name} must be an integer >= 0, got {getattr(self, name)!r}")
        if not (isinstance(self.row_groups, tuple) and all(_is_count(n) for n in self.row_groups)):
            raise ManifestError(f"{self.path}: row_groups must be a list of integers >= 0, got {self.row_groups!r}")
        if sum(self.row_groups) != self.record_count:
            raise ManifestError(f"{self.path}: row groups add up to {sum(self.row_groups)}, not {self.record_count}")


@dataclass(frozen=True)
class ComponentManifest:
    """One component, pinned."""

    name: str
    table: str
    snapshot_id: int
    weight: float
    """Normalised weight: the components' weights sum to one."""
    files: tuple[DataFile, ...]
    schema: dict[str, Any]
    """The snapshot's Iceberg schema (JSON), to bind the row filter in the loader's readers."""
    ref: str | None = None
    """The ref the spec named (tag, branch or id), for the record; the snapshot id is what counts."""
    filter: str | None = None
    heldout_fraction: float = 0.0

    def __post_init__(self) -> None:
        _require(
            isinstance(self.name, str) and bool(self.name),
            f"component name must be a non-empty string, got {self.name!r}",
        )
        where = f"component {self.name!r}"
        _require(isinstance(self.table, str) and bool(self.table), f"{where}: table must be a non-empty string")
        _require(_is_int(self.snapshot_id), f"{where}: snapshot_id must be an integer, got {self.snapshot_id!r}")
        _require(
            _is_number(self.weight) and self.weight >= 0,
            f"{where}: weight must be a finite number >= 0, got {self.weight!r}",
        )
        _require(
            _is_number(self.heldout_fraction) and 0 <= self.heldout_fraction < 1,
            f"{where}: heldout_fraction must be in [0, 1), got {self.heldout_fraction!r}",
        )
        _require(
            isinstance(self.files, tuple) and all(isinstance(f, DataFile) for f in self.files),
            f"{where}: files must be a list of files",
        )
        _require(isinstance(self.schema, dict), f"{where}: schema must be an object, got {self.schema!r}")
        for name in ("ref", "filter"):
            value = getattr(self, name)
            _require(
                value is None or isinstance(value, str), f"{where}: {name} must be a string or null, got {value!r}"
            )

    @property
    def record_count(self) -> int:
        return sum(f.record_count for f in self.files)

    @property
    def label(self) -> str:
        """``table@snapshot`` for messages."""
        return f"{self.table}@{self.snapshot_id}"


def no_records(label: str) -> str:
    """Why a component with a weight above 0 and no records is refused: the loader could never draw its share."""
    return (
        f"{label} has no records: a component with a weight above 0 needs documents (did its filter drop them "
        "all?); pin a snapshot that has some, or give it weight 0"
    )


@dataclass(frozen=True)
class Manifest:
    name: str
    seed: int
    components: tuple[ComponentManifest, ...]
    catalog: dict[str, str]
    """The catalog the snapshots were resolved in: its name and (password-free) URI."""
    heldout: dict[str, str] = field(default_factory=dict)
    """How the held-out split is computed (``method`` and ``salt``, see ``mixtures.heldout``)."""
    pinned_at: str = ""
    code_version: str = ""
    format: str = FORMAT
    provenance: dict[str, Any] = field(default_factory=dict)
    """How the weights were chosen, when a program chose them (``factory mix search``: its sweep id,
    trials and fit quality), carried into every checkpoint's lineage. Absent when empty, so
    manifests pinned from a spec by hand keep their fingerprint."""

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and bool(self.name), f"name must be a non-empty string, got {self.name!r}")
        _require(
            _is_int(self.seed) and 0 <= self.seed < 2**63, f"seed must be an integer in [0, 2**63), got {self.seed!r}"
        )
        _require(
            isinstance(self.components, tuple) and bool(self.components), "a manifest needs at least one component"
        )
        names = [c.name for c in self.components]
        repeated = sorted({n for n in names if names.count(n) > 1})
        _require(not repeated, f"component names must be unique: {', '.join(repeated)} repeated")
        # Pinning normalises the weights; the loader mixes by them as they are.
        total = math.fsum(c.weight for c in self.components)
        _require(math.isclose(total, 1.0, abs_tol=1e-9), f"the components' weights sum to {total:g}, not 1")
        for name in ("catalog", "heldout"):
            value = getattr(self, name)
            _require(
                isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()),
                f"{name} must map names to strings, got {value!r}",
            )
        _require(
            isinstance(self.pinned_at, str) and isinstance(self.code_version, str),
            "pinned_at and code_version must be strings",
        )
        _require(
            isinstance(self.provenance, dict) and all(isinstance(k, str) for k in self.provenance),
            f"provenance must be an object, got {self.provenance!r}",
        )

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of everything that defines the stream (computed once: a
        manifest of many files takes a while, and it cannot change)."""
        return _fingerprint(self.to_dict())

    def component(self, name: str) -> ComponentManifest:
        for component in self.components:
            if component.name == name:
                return component
        raise ManifestError(f"no component named {name!r} in manifest {self.name!r}")

    def to_dict(self) -> dict[str, Any]:
        data = _plain(self)
        if not data["provenance"]:
            del data["provenance"]
        data["fingerprint"] = None  # placeholder keeps the key order stable; filled by to_json
        return data

    def to_json(self) -> str:
        data = self.to_dict()
        data["fingerprint"] = self.fingerprint
        return json.dumps(data, indent=2, sort_keys=False) + "\n"

    def save(self, path: str | Path) -> None:
        write_atomically(path, self.to_json())

    @classmethod
    def from_dict(cls, data: dict[str, Any], label: str = "manifest") -> Manifest:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ManifestError(
                f"{label} is not a pinned mixture manifest (format {found!r}, expected {FORMAT!r}); "
                "make one with `factory mix pin SPEC --output MANIFEST`"
            )
        # An edit without a recomputed fingerprint is named as such, before what the edit broke.
        recorded = data.get("fingerprint")
        if recorded != _fingerprint(data):
            raise ManifestError(
                f"{label} was changed after it was pinned (fingerprint {recorded} does not match its content "
                f"{_fingerprint(data)}); pin the mixture again instead of editing the manifest"
            )
        # Anyone can recompute a fingerprint: the content is also checked for meaning.
        try:
            content = _keys(cls, {k: v for k, v in data.items() if k != "fingerprint"}, "the manifest")
            components = content["components"]
            _require(isinstance(components, list), f"components must be a list, got {type(components).__name__}")
            manifest = cls(**{**content, "components": tuple(_component(c, i) for i, c in enumerate(components))})
        except ManifestError as exc:
            raise ManifestError(
                f"{label} is malformed: {exc}; pin the mixture again instead of editing the manifest"
            ) from None
        if not _fills_a_default(data):
            # Built from every key of ``data`` as it is, the manifest has ``data``'s fingerprint, just
            # checked; computing it again from the dataclasses costs a third of loading a manifest
            # of many files.
            manifest.__dict__["fingerprint"] = recorded
        elif recorded != manifest.fingerprint:  # a key left out that has a default
            raise ManifestError(
                f"{label} was changed after it was pinned (fingerprint {recorded} does not match its content "
                f"{manifest.fingerprint}); pin the mixture again instead of editing the manifest"
            )
        return manifest

    @classmethod
    def load(cls, path: str | Path) -> Manifest:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ManifestError(f"cannot read manifest {path}: {exc.strerror or exc}") from exc
        except json.JSONDecodeError as exc:
            raise ManifestError(f"manifest {path} is not JSON: {exc}") from exc
        return cls.from_dict(data, label=f"manifest {path}")


def _fingerprint(data: dict[str, Any]) -> str:
    content = {k: v for k, v in data.items() if k not in _NOT_FINGERPRINTED}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _fills_a_default(data: dict[str, Any]) -> bool:
    """Whether the manifest built from ``data`` (already checked) holds a key ``data`` left out, or
    drops one it has (an empty ``provenance``), either of which changes its fingerprint."""
    if "provenance" in data and not data["provenance"]:
        return True
    if any(name not in data for name in _defaulted(Manifest) - {"provenance"}):
        return True
    for component in data["components"]:
        if any(name not in component for name in _defaulted(ComponentManifest)):
            return True
        if _defaulted(DataFile) and any(name not in f for f in component["files"] for name in _defaulted(DataFile)):
            return True
    return False


def _defaulted(cls: type) -> frozenset[str]:
    known, required = _field_names(cls)
    return known - set(required)


def _component(data: Any, index: int) -> ComponentManifest:
    """One component of a manifest's JSON, its keys and its files' keys checked."""
    named = isinstance(data, dict) and isinstance(data.get("name"), str)
    where = f"component {data['name']!r}" if named else f"component {index}"
    _keys(ComponentManifest, data, where)
    files = data["files"]
    _require(isinstance(files, list), f"{where}: files must be a list, got {type(files).__name__}")
    built = []
    for i, f in enumerate(files):
        _keys(DataFile, f, f"{where}: file {i}")
        groups = f["row_groups"]
        built.append(DataFile(**{**f, "row_groups": tuple(groups) if isinstance(groups, list) else groups}))
    return ComponentManifest(**{**data, "files": tuple(built)})


def _keys(cls: type, data: Any, where: str) -> dict[str, Any]:
    """``data`` if it is an object holding every required field of ``cls`` and nothing else."""
    _require(isinstance(data, dict), f"{where} must be an object, got {type(data).__name__}")
    known, required = _field_names(cls)
    if data.keys() == known:  # every key and no other: the usual case, once per data file
        return data
    missing = [n for n in required if n not in data]
    _require(not missing, f"{where}: missing key(s) {', '.join(missing)}")
    unknown = sorted(set(data) - known)
    _require(not unknown, f"{where}: unknown key(s) {', '.join(unknown)}")
    return data


@functools.cache
def _field_names(cls: type) -> tuple[frozenset[str], tuple[str, ...]]:
    """A dataclass's field names, and those without a default (asked once per file of a manifest)."""
    known = fields(cls)
    required = tuple(f.name for f in known if f.default is MISSING and f.default_factory is MISSING)
    return frozenset(f.name for f in known), required


def _plain(value: Any) -> Any:
    """``dataclasses.asdict`` without its deep copy of every leaf, which costs most of the time of a
    manifest of many files; the values here are JSON's (strings, numbers, lists, objects)."""
    if isinstance(value, (str, int, float, type(None))):
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _ordered_fields(type(value))}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@functools.cache
def _ordered_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ManifestError(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not a count


def _is_count(value: Any) -> bool:
    return _is_int(value) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
