"""Identifiers and references: validation is plain; resolution runs on a real SQLite catalog."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakehouse.catalog import ensure_table, resolve
from lakehouse.errors import EmptyTableError, InvalidIdentifierError, RefNotFoundError
from lakehouse.refs import TableRef, parse_identifier, validate_ref_name, validate_tag_name
from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema


@pytest.mark.parametrize("text", ["raw.code", "a.b.c", "_ns.t_1", "Raw.Code2"])
def test_valid_identifiers_parse(text):
    assert parse_identifier(text) == tuple(text.split("."))


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "needed"),
        ("code", "expected namespace.table"),
        ("raw..code", "empty name"),
        (".code", "empty name"),
        ("raw.", "empty name"),
        ("../etc.passwd", "not a path"),
        ("raw/code", "not a path"),
        ("s3://bucket.table", "not a path or URI"),
        ("file:raw.code", "must be letters"),
        ("raw.co de", "must be letters"),
        ("raw.1code", "not starting with a digit"),
    ],
)
def test_invalid_identifiers_are_refused_with_a_reason(text, why):
    with pytest.raises(InvalidIdentifierError, match=why):
        parse_identifier(text)


def test_ref_parsing():
    assert TableRef.parse("raw.code") == TableRef(("raw", "code"), None)
    assert TableRef.parse("raw.code@123") == TableRef(("raw", "code"), "123")
    assert TableRef.parse("raw.code@v1.0-rc") == TableRef(("raw", "code"), "v1.0-rc")
    with pytest.raises(InvalidIdentifierError, match="nothing after"):
        TableRef.parse("raw.code@")
    with pytest.raises(InvalidIdentifierError):
        TableRef.parse("raw.code@../x")


@pytest.mark.parametrize("name", ["123", "a/b", "..", "a..b", "", "-x"])
def test_bad_tag_names(name):
    with pytest.raises(InvalidIdentifierError):
        validate_ref_name(name)


@pytest.mark.parametrize("name", ["-weird", ".", ".."])
def test_a_refused_ref_name_is_told_the_rules_it_broke(name):
    with pytest.raises(InvalidIdentifierError, match=r"starting with a letter, digit or '_', with no '\.\.'"):
        validate_ref_name(name)


@pytest.mark.parametrize("name", ["main", "audit-f-1", "audit-"])
def test_the_jobs_branch_names_are_no_tag_names(name):
    validate_ref_name(name)  # a branch may have it
    with pytest.raises(InvalidIdentifierError, match="is reserved: 'main' and names starting with 'audit-'"):
        validate_tag_name(name)


def test_a_tag_name_is_at_most_as_long_as_a_table_name():
    assert validate_tag_name("v" * 128) == "v" * 128
    assert validate_tag_name("production") == "production"
    with pytest.raises(InvalidIdentifierError, match="5000 characters, at most 128"):
        validate_tag_name("v" * 5000)


def _append(table, n: int) -> int:
    rows = [{"doc_id": f"d{i}", "source": "t", "text": "x", "path": None, "lang": None, "n_bytes": 1} for i in range(n)]
    table.append(pa.Table.from_pylist(rows, schema=arrow_schema(DOCUMENT_SCHEMA)))
    return table.current_snapshot().snapshot_id


def test_resolve_snapshot_ids_tags_and_branches(catalog):
    table = ensure_table(catalog, ("raw", "t"), DOCUMENT_SCHEMA)
    with pytest.raises(EmptyTableError):
        resolve(catalog, "raw.t")
    first = _append(table, 1)
    table.manage_snapshots().create_tag(first, "v1").create_branch(first, "audit").commit()
    second = _append(table, 2)

    assert resolve(catalog, "raw.t")[1].snapshot_id == second
    assert resolve(catalog, f"raw.t@{first}")[1].snapshot_id == first
    assert resolve(catalog, "raw.t@v1")[1].snapshot_id == first
    assert resolve(catalog, "raw.t@audit")[1].snapshot_id == first
    assert resolve(catalog, "raw.t@v1")[1].as_input() == {"table": "raw.t", "snapshot_id": first, "ref": "v1"}
    with pytest.raises(RefNotFoundError, match="no snapshot with that id"):
        resolve(catalog, "raw.t@42")
    with pytest.raises(RefNotFoundError, match=r"refs: audit, main, v1"):
        resolve(catalog, "raw.t@v2")


def test_a_name_too_long_for_a_file_system_or_catalog_is_refused():
    assert parse_identifier("raw." + "t" * 128) == ("raw", "t" * 128)
    with pytest.raises(InvalidIdentifierError, match="129 characters; at most 128"):
        parse_identifier("raw." + "t" * 129)
    with pytest.raises(InvalidIdentifierError, match="at most 128"):
        TableRef.parse("n" * 300 + ".code@v1")
