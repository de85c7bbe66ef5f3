"""The inspection pages keep what they read of evals.samples and evals.ratings per the table's
metadata file: a page asked again scans nothing (twenty people browsing read the table once,
benchmarks/ui/load.py), and the first request after a commit shows it."""

from __future__ import annotations

from collections import Counter

import pytest
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.table import Table
from starlette.testclient import TestClient

from evals.ratings import rating_row, record_rating
from tests.ui.inspected import SUITE, write_samples
from ui import samples
from ui.app import create_app
from ui.sources import Sources


@pytest.fixture
def sources(factory_home):
    return Sources(None, [factory_home])


@pytest.fixture
def client(sources):
    return TestClient(create_app(sources))


@pytest.fixture
def scans(monkeypatch) -> Counter:
    """Scans started per table ("evals.samples"); each scan is pyiceberg's own, counted on its way."""
    counted: Counter = Counter()
    scan = Table.scan

    def counting(self, *args, **kwargs):
        counted[".".join(self.name()[-2:])] += 1
        return scan(self, *args, **kwargs)

    monkeypatch.setattr(Table, "scan", counting)
    return counted


def test_the_samples_pages_asked_again_scan_nothing_and_show_a_commit_next(client, samples_home, catalog, scans):
    first, second = (str(c) for c in samples_home.checkpoints)
    row = samples_home.rows[0]
    urls = [
        "/samples",
        f"/samples?suite={SUITE}&verdict=fail",
        f"/samples/{row['sample_id']}",
        f"/samples/compare?suite={SUITE}&a={first}&b={second}",
    ]
    pages = [client.get(url) for url in urls]
    assert all(p.status_code == 200 for p in pages) and scans["evals.samples"] > 0
    read = scans["evals.samples"]
    assert [client.get(url).text for url in urls] == [p.text for p in pages]
    assert scans["evals.samples"] == read  # nothing read again

    added = {**row, "sample_id": "f" * 32, "eval_run_id": "ev-9", "sample_index": 5, "passed": False}
    write_samples(catalog, [added], run_id="samples-2")
    assert f'id="count">{len(samples_home.rows) + 1} samples' in client.get("/samples").text
    assert client.get(f"/samples/{added['sample_id']}").status_code == 200
    assert scans["evals.samples"] > read


def test_a_samples_texts_are_read_once_and_only_those_not_kept(samples_home, sources, scans):
    table = samples.samples_table(sources)
    by_id = {r["sample_id"]: r for r in samples_home.rows}
    x, y, z = list(by_id)[:3]
    first = samples.texts(table, [x, y], AlwaysTrue())
    assert scans["evals.samples"] == 1
    assert samples.texts(table, [y, x], AlwaysTrue()) == first and scans["evals.samples"] == 1
    both = samples.texts(table, [x, z], AlwaysTrue())
    assert scans["evals.samples"] == 2
    for sample_id, texts in (first | both).items():
        assert (texts["prompt"], texts["completion"]) == (by_id[sample_id]["prompt"], by_id[sample_id]["completion"])
    assert set(both) == {x, z}


def test_the_leaderboard_reads_the_ratings_once_per_commit(client, samples_home, catalog, scans):
    first, second = (str(c) for c in samples_home.checkpoints)
    sample = samples_home.rows[0]["sample_id"]

    def vote(k: int) -> None:
        record_rating(catalog, rating_row(f"r{k}", "ann", SUITE, "HumanEval/0", (first, sample), (second, sample), "a"))

    vote(0)
    vote(1)
    board = client.get("/ratings/leaderboard")
    assert board.status_code == 200 and "from 2 blind ratings" in board.text
    assert "from 2 blind ratings" in client.get(f"/ratings/leaderboard?suite={SUITE}").text
    assert client.get("/ratings/leaderboard").text == board.text
    assert scans["evals.ratings"] == 1  # one read for both suites' standings, none for the page again

    vote(2)
    assert "from 3 blind ratings" in client.get("/ratings/leaderboard").text
    assert scans["evals.ratings"] == 2
