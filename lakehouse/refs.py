"""Table identifiers and references: ``namespace.table`` and ``namespace.table@REF``.

REF is a snapshot id, a tag or a branch. Jobs record the snapshot id a reference resolved to,
never the tag, so a run can be repeated after the tag moves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyiceberg.table import Table

from lakehouse.errors import EmptyTableError, InvalidIdentifierError, RefNotFoundError

# One conservative name rule for every part: it is safe as a path segment in any warehouse
# (no "..", "/", scheme or whitespace can reach the table location) and in every catalog.
_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Each part becomes a folder name in the warehouse (file systems allow 255 bytes) and a value in
# the catalog (Hive's metastore allows 128 characters): checked before anything is created, so a
# name no file system or catalog can hold fails here, not after its namespace was made.
MAX_PART_CHARS = 128
_REF_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
# The branches the jobs write besides main: write-audit-publish's `audit-<run-id>`
# (docs/architecture.md, "Write-audit-publish"); no tag may take such a name.
AUDIT_PREFIX = "audit-"


def parse_identifier(text: str) -> tuple[str, ...]:
    """``"ns.table"`` → ``("ns", "table")``, rejecting anything that is not plain names."""
    if not isinstance(text, str) or not text:
        raise InvalidIdentifierError("a table identifier is needed, e.g. raw.code")
    if "://" in text or "/" in text or "\\" in text:
        raise InvalidIdentifierError(f"invalid table identifier {text!r}: expected namespace.table, not a path or URI")
    parts = tuple(text.split("."))
    if len(parts) < 2:
        raise InvalidIdentifierError(f"invalid table identifier {text!r}: expected namespace.table, e.g. raw.code")
    for part in parts:
        if not part:
            raise InvalidIdentifierError(f"invalid table identifier {text!r}: empty name between dots")
        if not _PART.match(part):
            raise InvalidIdentifierError(
                f"invalid table identifier {text!r}: {part!r} must be letters, digits and _, not starting with a digit"
            )
        if len(part) > MAX_PART_CHARS:
            raise InvalidIdentifierError(
                f"invalid table identifier {text[:40]}…: the name {part[:20]}… has {len(part)} characters; "
                f"at most {MAX_PART_CHARS} fit every file system and catalog. Choose a shorter name."
            )
    return parts


def quarantine_identifier(output: tuple[str, ...], quarantine: str | None) -> tuple[str, ...]:
    """The quarantine table of a job writing ``output``: ``quarantine`` if named, else the
    ``quarantine`` table in the output's namespace."""
    return _beside(output, quarantine, "quarantine")


def ingested_files_identifier(output: tuple[str, ...], files_table: str | None) -> tuple[str, ...]:
    """The ledger of files ingested into ``output``: ``files_table`` if named, else the
    ``ingested_files`` table in the output's namespace."""
    return _beside(output, files_table, "ingested_files")


def _beside(output: tuple[str, ...], named: str | None, default: str) -> tuple[str, ...]:
    return parse_identifier(named) if named else (*output[:-1], default)


def format_identifier(identifier: tuple[str, ...]) -> str:
    return ".".join(identifier)


def validate_ref_name(name: str) -> str:
    """A tag or branch name: letters, digits, ``_ . -``, starting with a letter, digit or ``_``,
    without ``..``, and not all digits (those are snapshot ids)."""
    if not _REF_NAME.match(name or "") or name.isdigit() or ".." in name:
        raise InvalidIdentifierError(
            f"invalid tag or branch name {name[:40]!r}: use letters, digits, '_', '.', '-', starting with a "
            "letter, digit or '_', with no '..', and not only digits (those name snapshot ids)"
        )
    return name


def validate_tag_name(name: str) -> str:
    """A name a user or a job may give a tag: a ref name (``validate_ref_name``) of at most
    ``MAX_PART_CHARS`` characters that is neither ``main`` nor an ``audit-`` branch's name."""
    validate_ref_name(name)
    if len(name) > MAX_PART_CHARS:
        # Every listing of refs (`factory tables`, the UI) shows the name whole.
        raise InvalidIdentifierError(
            f"invalid tag name {name[:20]}…: it has {len(name)} characters, at most {MAX_PART_CHARS}; choose a "
            "shorter one"
        )
    if name == "main" or name.startswith(AUDIT_PREFIX):
        # A tag there would stop the job whose branch it is (write-audit-publish: `audit-<run-id>`).
        raise InvalidIdentifierError(
            f"tag name {name!r} is reserved: 'main' and names starting with {AUDIT_PREFIX!r} are the "
            "branches the jobs write; choose another name"
        )
    return name


@dataclass(frozen=True)
class TableRef:
    """A parsed ``namespace.table[@REF]``; ``ref`` is None for the current snapshot of main."""

    identifier: tuple[str, ...]
    ref: str | None = None

    @classmethod
    def parse(cls, text: str) -> TableRef:
        table_part, sep, ref = text.partition("@")
        if sep and not ref:
            raise InvalidIdentifierError(f"invalid reference {text!r}: nothing after '@'")
        if ref and not ref.isdigit():
            validate_ref_name(ref)
        return cls(parse_identifier(table_part), ref or None)

    @property
    def table_name(self) -> str:
        return format_identifier(self.identifier)

    def __str__(self) -> str:
        return self.table_name + (f"@{self.ref}" if self.ref else "")


@dataclass(frozen=True)
class PinnedRef:
    """A reference resolved to the snapshot it names at the time of resolution."""

    identifier: tuple[str, ...]
    snapshot_id: int
    ref: str | None

    @property
    def table_name(self) -> str:
        return format_identifier(self.identifier)

    def as_input(self) -> dict[str, object]:
        """The entry this read takes in a snapshot's ``factory.inputs``."""
        entry: dict[str, object] = {"table": self.table_name, "snapshot_id": self.snapshot_id}
        if self.ref and not self.ref.isdigit():
            entry["ref"] = self.ref
        return entry

    def __str__(self) -> str:
        return f"{self.table_name}@{self.snapshot_id}"


def resolve_snapshot_id(table: Table, ref: str | None, label: str) -> int:
    """The snapshot id that ``ref`` names on ``table`` (current main when None)."""
    if ref is None:
        snapshot = table.current_snapshot()
        if snapshot is None:
            raise EmptyTableError(f"{label} has no snapshots yet; nothing to read")
        return snapshot.snapshot_id
    if ref.isdigit():
        if table.snapshot_by_id(int(ref)) is None:
            raise RefNotFoundError(
                f"{label}@{ref}: no snapshot with that id (expired or never existed); "
                f"`factory snapshots {label}` lists them"
            )
        return int(ref)
    named = table.metadata.refs.get(ref)
    if named is None:
        known = ", ".join(sorted(table.metadata.refs)) or "none"
        raise RefNotFoundError(f"{label}@{ref}: no tag or branch named {ref!r} (refs: {known})")
    return named.snapshot_id
