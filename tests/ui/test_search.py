"""A substring search shows a page of matches at a time, going on inside a row group where a page
fills there, so a row group of hundreds of matches is never one page of hundreds of rows."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.corpora import make_table
from ui import documents
from ui.app import create_app
from ui.sources import Sources


def test_a_search_shows_a_page_of_matches_and_goes_on_inside_the_row_group(catalog, factory_home):
    table = make_table(catalog, "raw.one", 120, files=1)  # one file, one row group
    snapshot_id = table.current_snapshot().snapshot_id
    texts = table.scan().to_arrow().column("text").to_pylist()
    expected = sum("." in t for t in texts)
    assert expected > 3 * documents.PAGE_SIZE

    found, cursors, cursor = [], [], None
    while True:
        page = documents.search(table, snapshot_id, "raw.one", ".", cursor)
        assert len(page.rows) <= documents.PAGE_SIZE
        found += [r["doc_id"] for r in page.rows]
        if page.next_cursor is None:
            break
        cursors.append(page.next_cursor)
        cursor = page.next_cursor
    assert cursors[:3] == ["0.0.25", "0.0.50", "0.0.75"]
    assert len(found) == len(set(found)) == expected

    client = TestClient(create_app(Sources(None, [factory_home])))
    first = client.get(f"/tables/raw.one/snapshots/{snapshot_id}/documents?q=.")
    assert first.status_code == 200 and "cursor=0.0.25" in first.text
    assert first.text.count("?doc_id=") == documents.PAGE_SIZE
    assert client.get(f"/tables/raw.one/snapshots/{snapshot_id}/documents?q=.&cursor=0.0.x").status_code == 400
