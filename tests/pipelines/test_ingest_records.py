"""Record-level ingest rules: plain functions, no Spark."""

from __future__ import annotations

import orjson
import pytest

from lakehouse.errors import InputError
from lakehouse.schemas import QUARANTINE_RECORD_BYTES
from pipelines.ingest_records import (
    RecordConfig,
    doc_id_for,
    file_record,
    jsonl_records,
    lang_from_path,
    mapping_records,
)

CFG = RecordConfig(source="web", id_field="id", max_doc_bytes=100)


def one(line: bytes, cfg: RecordConfig = CFG) -> dict:
    (row,) = list(jsonl_records([line], "dump/a.jsonl", cfg))
    return row


def test_good_record_becomes_a_document():
    row = one(b'{"id": 7, "text": "h\\u00e9llo", "url": "http://x"}\n')
    assert row["reason"] is None
    assert row["text"] == "héllo"
    assert row["n_bytes"] == 6
    assert row["doc_id"] == doc_id_for("web", "id:7")
    assert row["path"] == "dump/a.jsonl:1"


@pytest.mark.parametrize(
    "line, reason",
    [
        (b'{"id": 1, "text": "x"', "malformed-json"),
        (b"[1, 2]", "malformed-json"),
        (b'{"id": 1, "text": "caf\xe9"}', "invalid-utf8"),
        (b'{"id": 1, "text": "a\\u0000b"}', "nul-byte"),
        (b'{"id": 1, "text": "   "}', "empty"),
        (b'{"id": 1, "text": ""}', "empty"),
        (b'{"id": 1, "text": "' + b"x" * 101 + b'"}', "too-large"),
        (b'{"id": 1, "body": "x"}', "missing-text"),
        (b'{"id": 1, "text": 5}', "missing-text"),
        (b'{"text": "x"}', "missing-id"),
        (b'{"id": 1, "text": "\\ud800"}', "invalid-utf8"),
    ],
)
def test_bad_records_are_refused_with_their_reason_and_bytes(line, reason):
    row = one(line)
    assert row["reason"] == reason
    assert row["detail"]
    assert row["record"] == line
    assert row["text"] is None


def test_blank_lines_are_not_records_and_positions_count_lines():
    rows = list(jsonl_records([b'{"text":"a"}\n', b"\n", b'{"text":"b"}\n'], "f.jsonl", RecordConfig(source="web")))
    assert [r["path"] for r in rows] == ["f.jsonl:1", "f.jsonl:3"]
    assert [r["ordinal"] for r in rows] == [1, 3]
    # Without an id field the position is the id: the same file gives the same ids.
    assert rows[0]["doc_id"] == doc_id_for("web", "f.jsonl:1")


def test_a_byte_order_mark_opening_the_file_is_ignored_and_one_inside_it_is_refused():
    bom = b"\xef\xbb\xbf"
    rows = list(jsonl_records([bom + b'{"text":"a"}\r\n', bom + b'{"text":"b"}\n'], "f.jsonl", RecordConfig("web")))
    assert (rows[0]["reason"], rows[0]["text"]) == (None, "a")
    assert rows[1]["reason"] == "malformed-json"


def test_a_missing_text_says_whether_the_field_is_absent_or_null():
    details = [one(line)["detail"] for line in (b'{"id": 1}', b'{"id": 1, "text": null}')]
    assert details == ["text field 'text' is missing", "text field 'text' is null"]


def test_optional_fields_fill_path_and_lang():
    cfg = RecordConfig(source="web", path_field="url", lang_field="lang")
    row = one(b'{"text": "x", "url": "http://e.com", "lang": "en"}', cfg)
    assert (row["path"], row["lang"]) == ("http://e.com", "en")


def test_parquet_rows_use_row_numbers_and_keep_the_row_when_refused():
    rows = list(mapping_records([{"text": "a"}, {"text": None}, {"text": b"\xff"}], "p.parquet", RecordConfig("web")))
    assert [r["reason"] for r in rows] == [None, "missing-text", "invalid-utf8"]
    assert rows[0]["path"] == "p.parquet#0"
    assert orjson.loads(rows[1]["record"]) == {"text": None}


def test_records_are_truncated_in_quarantine():
    row = one(b'{"id": 1, "text": "' + b"y" * (2 * QUARANTINE_RECORD_BYTES) + b'"}')
    assert row["reason"] == "too-large"
    assert len(row["record"]) == QUARANTINE_RECORD_BYTES


CODE = RecordConfig(source="code", max_doc_bytes=4000)


def _file(relpath: str, data: bytes, cfg: RecordConfig = CODE) -> dict:
    pos = {"at": 0}

    def read(n: int) -> bytes:
        chunk = data[pos["at"] :] if n < 0 else data[pos["at"] : pos["at"] + n]
        pos["at"] += len(chunk)
        return chunk

    return file_record(relpath, len(data), read, cfg)


@pytest.mark.parametrize(
    "relpath, data, reason",
    [
        ("repo/logo.png", b"\x89PNG....", "binary"),
        ("repo/blob.dat", b"abc\x00def", "binary"),
        ("repo/node_modules/x/index.js", b"module.exports = 1", "vendored"),
        ("repo/third_party/lib.c", b"int x;", "vendored"),
        ("repo/app.min.js", b"var a=1", "minified"),
        ("repo/bundle.js", b"var a=1;" * 130, "minified"),
        ("repo/latin1.py", b"# caf\xe9\n", "invalid-utf8"),
        ("repo/empty.py", b"", "empty"),
        ("repo/__init__.py", b"\n\n", "empty"),
        ("repo/big.py", b"x = 1\n" * 1000, "too-large"),
    ],
)
def test_files_that_are_not_source_are_refused(relpath, data, reason):
    row = _file(relpath, data)
    assert row["reason"] == reason, row["detail"]
    assert row["path"] == relpath
    assert row["record"] == data[:QUARANTINE_RECORD_BYTES][: len(row["record"])]


def test_source_file_becomes_a_document_with_lang_from_extension():
    row = _file("repo/pkg/mod.py", b"def f():\n    return 1\n")
    assert row["reason"] is None
    assert row["lang"] == "python"
    assert row["doc_id"] == doc_id_for("code", "repo/pkg/mod.py")


@pytest.mark.parametrize(
    "path, lang",
    [
        ("a/b.py", "python"),
        ("x.RS", "rust"),
        ("Makefile", "makefile"),
        ("d/Dockerfile", "dockerfile"),
        ("LICENSE", None),
    ],
)
def test_lang_from_path(path, lang):
    assert lang_from_path(path) == lang


@pytest.mark.parametrize("kwargs", [{"source": "Bad Name"}, {"source": "web", "max_doc_bytes": 0}, {"source": ""}])
def test_bad_config_is_refused_early(kwargs):
    with pytest.raises(InputError):
        RecordConfig(**kwargs)
