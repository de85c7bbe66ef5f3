"""The pinned manifest: everything the loader needs to plan a mixture, and nothing that can move.

``factory mix pin`` writes it; the loader accepts nothing else. It names every component's
snapshot id (never a tag), the exact data files with their record and row-group counts, the
row filter and the held-out split, and a fingerprint over all of that, so a checkpoint's
lineage can say exactly which data a run saw.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
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

    @property
    def record_count(self) -> int:
        return sum(f.record_count for f in self.files)

    @property
    def label(self) -> str:
        """``table@snapshot`` for messages."""
        return f"{self.table}@{self.snapshot_id}"


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

    @property
    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of everything that defines the stream."""
        content = {k: v for k, v in self.to_dict().items() if k not in _NOT_FINGERPRINTED}
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    def component(self, name: str) -> ComponentManifest:
        for component in self.components:
            if component.name == name:
                return component
        raise ManifestError(f"no component named {name!r} in manifest {self.name!r}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
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
        try:
            components = tuple(
                ComponentManifest(
                    **{
                        **c,
                        "files": tuple(DataFile(**{**f, "row_groups": tuple(f["row_groups"])}) for f in c["files"]),
                    }
                )
                for c in data["components"]
            )
            manifest = cls(**{**{k: v for k, v in data.items() if k != "fingerprint"}, "components": components})
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{label} is malformed: {exc}") from exc
        recorded = data.get("fingerprint")
        if recorded != manifest.fingerprint:
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
