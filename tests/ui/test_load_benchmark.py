"""benchmarks/ui/load.py's parts that need no load: the inspection pages' URLs it finds in a home
answer, and a page type a baseline answers 404 throughout is left out of its figures and errors."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from benchmarks.ui.load import Load, discover
from ui.app import create_app
from ui.sources import Sources

INSPECTION = ("samples", "sample", "compare", "blind rating", "leaderboard", "playground")


def test_the_inspection_pages_it_finds_in_a_home_answer(samples_home, factory_home, monkeypatch):
    monkeypatch.setenv("FACTORY_HOME", str(factory_home))  # discover() sets it: restored after the test
    pages = discover(factory_home)
    assert set(INSPECTION) <= set(pages)
    assert len(pages["sample"]) == len({r["sample_id"] for r in samples_home.rows})  # a table this small: every sample
    assert any("&a=" in url and "&b=" in url for url in pages["compare"])
    client = TestClient(create_app(Sources(None, [factory_home])))
    for kind in INSPECTION:
        for url in pages[kind]:
            assert client.get(url).status_code == 200, (kind, url)


@pytest.mark.parametrize("codes", [[404, 404], [404, 200]])
def test_a_type_answered_404_throughout_is_absent_not_an_error(codes):
    load = Load(rss_start=100.0)
    for code in codes:
        load.times.setdefault("samples", []).append(0.01)
        load.answers.setdefault("samples", []).append(code)
        if code != 200:
            load.errors.append(("samples", f"{code} /samples"))
    load.times["home"], load.answers["home"] = [0.02], [200]
    summary = load.summary(["home", "samples"])
    if codes == [404, 404]:
        assert summary["absent"] == ["samples"] and summary["errors"] == []
        assert list(summary["pages"]) == ["home"]
    else:  # some answered: a page that is there and failed
        assert summary["absent"] == [] and summary["errors"] == ["404 /samples"]
        assert list(summary["pages"]) == ["home", "samples"]
