"""What the UI keeps between requests: seen anew the moment what it was made from changes, read once
while it does not, bounded, and computed once however many ask for it at the same time."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from lakehouse.decisions import record_decision
from tests.corpora import make_table
from tests.decisions import gate_decision
from ui import documents
from ui.app import create_app
from ui.cache import memo
from ui.sources import Sources


@pytest.fixture
def sources(catalog, factory_home):
    return Sources(None, [factory_home])


@pytest.fixture
def client(sources):
    return TestClient(create_app(sources))


def home_row(client, name: str) -> str:
    return re.search(rf'<tr><td><a href="/tables/{re.escape(name)}">.*?</tr>', client.get("/").text, re.S).group(0)


def test_a_commit_is_seen_on_the_next_request(catalog, client):
    first = make_table(catalog, "raw.web", 6, files=1).current_snapshot().snapshot_id
    assert str(first) in home_row(client, "raw.web") and "<td>6</td>" in home_row(client, "raw.web")
    assert f"@{first}" in client.get("/tables/raw.web/snapshots/main").text

    second = make_table(catalog, "raw.web", 4, files=1, seed=1).current_snapshot().snapshot_id
    assert second != first
    assert str(second) in home_row(client, "raw.web") and "<td>10</td>" in home_row(client, "raw.web")
    assert f"@{second}" in client.get("/tables/raw.web/snapshots/main").text
    assert client.get("/tables/raw.web").text.count('<a href="/tables/raw.web/snapshots/') == 2

    make_table(catalog, "raw.more", 3, files=1)  # a new table
    assert "raw.more" in client.get("/").text


def test_a_new_decision_is_listed_on_the_next_request(catalog, client):
    make_table(catalog, "filtered.code", 3, files=1)
    gate = gate_decision("code")
    record_decision(catalog, gate)
    assert gate["decision_id"] in client.get("/decisions").text
    later = gate_decision("text", "refused", decided_at="2030-01-01T00:00:00+00:00")
    record_decision(catalog, later)
    listed = client.get("/decisions").text
    assert gate["decision_id"] in listed and later["decision_id"] in listed
    assert client.get(f"/decisions/{later['decision_id']}").status_code == 200


def test_a_pinned_page_is_read_once(catalog, client, monkeypatch):
    table = make_table(catalog, "raw.many", 100, files=4)
    snapshot_id = table.current_snapshot().snapshot_id
    opened: list[str] = []
    original = documents.open_parquet
    monkeypatch.setattr(documents, "open_parquet", lambda uri, label: opened.append(uri) or original(uri, label))
    url = f"/tables/raw.many/snapshots/{snapshot_id}/documents?page_no=2"
    first = client.get(url)
    assert first.status_code == 200 and len(opened) == 1
    again = client.get(url)
    assert again.text == first.text and len(opened) == 1  # nothing read again
    make_table(catalog, "raw.many", 5, files=1, seed=2)  # a commit: the pinned snapshot is still the same
    assert client.get(url).text == first.text and len(opened) == 1


def test_a_run_that_logs_more_is_drawn_again(client, factory_home):
    run_dir = factory_home / "runs" / "live"
    run_dir.mkdir(parents=True)
    metrics = run_dir / "metrics.jsonl"

    def log(step: int, loss: float) -> None:
        record = {"kind": "train", "step": step, "loss": loss, "lr": 0.001, "tokens_per_s": 10.0}
        with metrics.open("a") as out:
            out.write(json.dumps(record) + "\n")

    log(1, 9.0)
    before = client.get("/runs/runs/live").text
    assert "step 1 · loss 9.0000" in before
    log(2, 8.5)
    after = client.get("/runs/runs/live").text
    assert "step 2 · loss 8.5000" in after
    plots = [re.findall(r'title="training loss" src="([^"]*)"', page) for page in (before, after)]
    assert plots[0] != plots[1]


def test_a_run_page_skips_metric_lines_whose_values_are_not_numbers(client, factory_home):
    """A hand-edited ``metrics.jsonl`` with a step of "three" or 1e400 gave the run page a 500."""
    run_dir = factory_home / "runs" / "edited"
    run_dir.mkdir(parents=True)
    lines = [
        {"kind": "train", "step": 1, "loss": 9.0, "lr": 0.001, "tokens_per_s": 10.0},
        {"kind": "train", "step": "three", "loss": 2},
        {"kind": "train", "step": True, "loss": 2},
        {"kind": 7, "step": 4, "loss": 2},
        {"kind": "train", "step": 5, "loss": 8.0, "lr": "abc", "tokens_per_s": None},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + '\n{"kind": "train", "step": 1e400, "loss": 2}\n'
    (run_dir / "metrics.jsonl").write_text(text)
    page = client.get("/runs/runs/edited")
    assert page.status_code == 200, page.text[-500:]
    assert "step 5 · loss 8.0000" in page.text


def test_a_runs_folder_named_twice_or_inside_another_lists_each_run_once(factory_home):
    """``--runs $FACTORY_HOME --runs $FACTORY_HOME/runs`` listed every run twice, under two keys."""
    run_dir = factory_home / "runs" / "one"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "loss": 1.0}) + "\n")
    sources = Sources(None, [factory_home, factory_home / "runs", factory_home])
    assert [r.key for r in sources.runs()] == ["runs/one"]


def test_a_cache_keeps_its_newest_entries_only():
    calls: list[int] = []

    @memo(2)
    def square(n: int) -> int:
        calls.append(n)
        return n * n

    assert [square(n) for n in (1, 2, 1, 3)] == [1, 4, 1, 9]  # 3 pushes out 2, the least recently used
    assert calls == [1, 2, 3]
    assert square(1) == 1 and calls == [1, 2, 3]
    assert square(2) == 4 and calls == [1, 2, 3, 2]


def test_a_value_asked_for_at_once_by_many_is_computed_once_and_a_failure_is_not_kept():
    calls: list[str] = []

    @memo(8)
    def slow(key: str) -> str:
        calls.append(key)
        time.sleep(0.2)
        if key == "bad":
            raise ValueError(key)
        return key.upper()

    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(slow("page"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == ["PAGE"] * 8 and calls == ["page"]
    for _ in range(2):
        with pytest.raises(ValueError):
            slow("bad")
    assert calls == ["page", "bad", "bad"]


def test_the_catalog_parses_a_table_once_per_commit(catalog, sources):
    make_table(catalog, "raw.web", 3, files=1)
    first = sources.catalog.load_table(("raw", "web"))
    assert sources.catalog.load_table(("raw", "web")) is first
    catalog.load_table(("raw", "web")).append(pa.Table.from_pylist([], schema=first.schema().as_arrow()))
    newer = sources.catalog.load_table(("raw", "web"))
    assert newer is not first and newer.metadata_location != first.metadata_location
    assert not sources.catalog.table_exists(("raw", "nothing"))


def test_the_folders_are_walked_again_only_when_one_changed(sources, factory_home, monkeypatch):
    from ui import sources as found

    first = factory_home / "runs" / "a"
    first.mkdir(parents=True)
    (first / "metrics.jsonl").write_text("")
    long_ago = time.time() - 60
    for folder in (factory_home, factory_home / "runs", first):  # settled: changed well before the walk
        os.utime(folder, (long_ago, long_ago))
    walks: list[str] = []
    walk = found._walk
    monkeypatch.setattr(found, "_walk", lambda root: walks.append(str(root)) or walk(root))

    assert [r.key for r in sources.runs()] == ["runs/a"] and len(walks) == 1
    assert [r.key for r in sources.runs()] == ["runs/a"] and len(walks) == 1  # nothing changed: not walked
    second = factory_home / "runs" / "b"
    (second / "checkpoints").mkdir(parents=True)  # changes runs/'s modification time
    assert [r.key for r in sources.runs()] == ["runs/a", "runs/b"] and len(walks) == 2
    # Walked within a second of a change: not trusted again, however the times compare.
    assert [r.key for r in sources.runs()] == ["runs/a", "runs/b"] and len(walks) == 3
