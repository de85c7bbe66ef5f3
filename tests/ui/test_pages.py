"""The UI's pages over a catalog made without Spark: paging by seeking, escaping, clear errors."""

from __future__ import annotations

import html

import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema
from tests.conftest import run_factory
from tests.corpora import make_table
from ui import documents
from ui.app import create_app
from ui.sources import Sources

XSS = '<script>alert(1)</script><img src=x onerror="alert(2)"><a href="javascript:alert(3)">x</a>'


@pytest.fixture
def client(catalog, factory_home):
    return TestClient(create_app(Sources(None, [factory_home])))


@pytest.fixture
def opened(monkeypatch):
    """The data files the documents module opens, in order."""
    seen: list[str] = []
    original = documents.open_parquet

    def counting(uri: str, label: str):
        seen.append(uri)
        return original(uri, label)

    monkeypatch.setattr(documents, "open_parquet", counting)
    return seen


def test_a_page_of_documents_reads_only_the_file_and_row_groups_that_hold_it(catalog, opened):
    table = make_table(catalog, "raw.many", 600, files=6, row_group_rows=20)
    snapshot_id = table.current_snapshot().snapshot_id
    everything = table.scan().to_arrow()
    files = documents.data_files(table, snapshot_id, "raw.many")
    assert len(files) == 6 and sum(f.records for f in files) == 600

    page = documents.read_page(table, snapshot_id, "raw.many", page=5, size=25)  # rows 125..149: file 2
    assert opened == [files[1].uri] and page.files_read == 1 and page.files_total == 6
    first_rows = pa.concat_tables([documents.open_parquet(f.uri, "x").read() for f in files[1:2]]).slice(
        25, 25
    )  # file 2 holds rows 100..199
    assert [r["doc_id"] for r in page.rows] == first_rows.column("doc_id").to_pylist()

    opened.clear()
    straddling = documents.read_page(table, snapshot_id, "raw.many", page=7, size=30)  # rows 210..239: files 3
    assert len(opened) == 1 and len(straddling.rows) == 30
    opened.clear()
    across = documents.read_page(table, snapshot_id, "raw.many", page=3, size=60)  # rows 180..239: files 2 and 3
    assert opened == [files[1].uri, files[2].uri] and len(across.rows) == 60
    assert documents.read_page(table, snapshot_id, "raw.many", page=100).rows == []

    wanted = everything.column("doc_id")[437].as_py()
    opened.clear()
    row, _, total = documents.find_document(table, snapshot_id, "raw.many", wanted)
    assert row["doc_id"] == wanted and total == 6 and len(opened) <= 6


def test_a_search_goes_on_from_its_cursor_and_finds_every_match_once(catalog, monkeypatch):
    table = make_table(catalog, "raw.search", 300, files=3, row_group_rows=10)
    snapshot_id = table.current_snapshot().snapshot_id
    texts = table.scan().to_arrow().column("text").to_pylist()
    needle = max(set(" ".join(texts).split()), key=lambda w: (sum(w in t for t in texts), w))
    expected = sum(needle in t for t in texts)
    monkeypatch.setattr(documents, "SEARCH_ROW_GROUPS", 4)  # many small steps
    found, cursor, steps = [], None, 0
    while True:
        page = documents.search(table, snapshot_id, "raw.search", needle, cursor, size=7)
        found += [r["doc_id"] for r in page.rows]
        steps += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert steps > 2 and len(found) == len(set(found)) == expected


def test_document_text_is_escaped_everywhere_it_is_shown(catalog, client):
    table = make_table(catalog, "raw.web", 5, files=1)
    row = {"doc_id": "evil", "source": "web", "text": XSS, "path": XSS, "lang": "en", "n_bytes": len(XSS)}
    table.append(pa.Table.from_pylist([row], schema=arrow_schema(DOCUMENT_SCHEMA)))
    snapshot_id = catalog.load_table(("raw", "web")).current_snapshot().snapshot_id
    for url in (
        f"/tables/raw.web/snapshots/{snapshot_id}/documents",
        f"/tables/raw.web/snapshots/{snapshot_id}/documents?doc_id=evil",
        f"/tables/raw.web/snapshots/{snapshot_id}/documents?q=script",
    ):
        response = client.get(url)
        assert response.status_code == 200, response.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text
        assert "<script" not in response.text and "<img src=x" not in response.text
        assert 'href="javascript:' not in response.text
        assert "default-src 'none'" in response.headers["content-security-policy"]


BAD_REQUESTS = [
    ("/tables/raw.nothing", 404, "raw.nothing does not exist"),
    ("/tables/raw.web/snapshots/12345", 404, "12345"),
    ("/tables/raw.web/snapshots/no-such-tag/documents", 404, "no-such-tag"),
    ("/tables/bad..name", 400, "bad..name"),
    ("/tables/raw.web/snapshots/main/documents?cursor=x.y&q=a", 400, "bad search cursor"),
    ("/tables/raw.web/snapshots/main/documents?page_no=-1", 400, "page_no"),
    ("/tables/raw.web/snapshots/main/documents?page_no=abc", 400, "page_no"),
    ("/tables/raw.web/snapshots/main/documents?doc_id=nope", 404, "no document 'nope'"),
    ("/tables/raw.web/snapshots/main/clusters", 400, "no cluster_id column"),
    ("/tables/raw.web/snapshots/main/quarantine", 400, "no reason column"),
    ("/runs/nope", 404, "no training run 'nope'"),
    ("/runs/nope/checkpoints/3", 404, "no training run"),
    ("/manifests/abc", 404, "no manifest"),
    ("/no/such/page", 404, "no such page"),
]


def test_bad_requests_get_a_clear_page_never_a_traceback(catalog, client):
    make_table(catalog, "raw.web", 5, files=1)
    for url, status, says in BAD_REQUESTS:
        response = client.get(url)
        assert response.status_code == status, f"{url}: {response.status_code} {response.text[-300:]}"
        assert says in html.unescape(response.text), url
        assert "Traceback" not in response.text and 'File "' not in response.text, url


def test_factory_ui_refuses_a_port_that_is_no_port(factory_home):
    done = run_factory("ui", "--port", "70000")
    assert done.returncode == 2 and "--port must be between 0 and 65535" in done.stderr
