"""The pages over evals.samples: filtered and paged lists, one sample with its test and sandbox
output, two checkpoints compared with the changed verdicts first; markup shown as text."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.testclient import TestClient

from tests.ui.inspected import SUITE, XSS
from tests.ui.paging import page_through
from ui import samples
from ui.app import create_app
from ui.samples import task_order
from ui.sources import Sources


@pytest.fixture
def client(factory_home):
    return TestClient(create_app(Sources(None, [factory_home])))


def listed(page: str) -> list[str]:
    return re.findall(r'<a class="sample" href="/samples/([0-9a-f]+)">', page)


def in_order(rows: list[dict]) -> list[str]:
    ordered = sorted(
        rows, key=lambda r: (r["run_id"], r["step"], r["suite"], task_order(r["task_id"]), r["sample_index"])
    )
    return [r["sample_id"] for r in ordered]


def assert_text_only(page: str) -> None:
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in page
    assert "<script" not in page and "<b>" not in page and "<img src=x" not in page


def test_no_samples_table_yet(client):
    page = client.get("/samples")
    assert page.status_code == 200 and "No <code>evals.samples</code> table yet" in page.text
    assert "No <code>evals.samples</code> table yet" in client.get("/samples/compare").text
    assert client.get("/samples/abc").status_code == 404


def test_samples_are_filtered_by_run_checkpoint_suite_task_and_verdict(client, samples_home):
    rows = samples_home.rows
    everything = client.get("/samples")
    assert everything.status_code == 200 and listed(everything.text) == in_order(rows)
    assert f"{len(rows)} samples" in everything.text
    first, second = (str(c) for c in samples_home.checkpoints)
    run = str(samples_home.checkpoints[0].parent.parent)
    cases = {
        "verdict=fail": [r for r in rows if r["passed"] is False],
        "verdict=pass": [r for r in rows if r["passed"]],
        "verdict=unjudged": [],
        "task=HumanEval/10": [r for r in rows if r["task_id"] == "HumanEval/10"],
        f"checkpoint={second}&verdict=pass": [r for r in rows if r["checkpoint"] == second and r["passed"]],
        f"run={run}&suite={SUITE}&task=HumanEval/3": [r for r in rows if r["task_id"] == "HumanEval/3"],
        "suite=heldout": [],
    }
    for query, expected in cases.items():
        page = client.get(f"/samples?{query}")
        assert page.status_code == 200, page.text[-300:]
        assert listed(page.text) == in_order(expected), query
    assert "no sample matches" in client.get("/samples?suite=heldout").text
    choices = client.get("/samples").text.split('name="checkpoint"')[1].split("</select>")[0]
    assert f'value="{first}">runs/tiny step 1<' in choices and f'value="{second}">runs/tiny step 2<' in choices


def test_samples_page_through_keeping_their_filters(client, samples_home, monkeypatch):
    monkeypatch.setattr(samples, "PAGE_SIZE", 3)
    failed = in_order([r for r in samples_home.rows if r["passed"] is False])
    seen = page_through(client, "/samples?verdict=fail", listed, {"verdict": "fail"})
    assert seen == failed and len(failed) > 3
    for bad, says in (("verdict=maybe", "verdict must be one of pass, fail, unjudged"), ("page_no=-1", "page_no")):
        refused = client.get(f"/samples?{bad}")
        assert refused.status_code == 400 and says in html.unescape(refused.text)


def test_a_sample_shows_its_prompt_completion_test_and_sandbox_output_as_text(client, samples_home):
    (row,) = [
        r
        for r in samples_home.rows
        if r["task_id"] == "HumanEval/0" and r["checkpoint"] == str(samples_home.checkpoints[0])
    ]
    page = client.get(f"/samples/{row['sample_id']}")
    assert page.status_code == 200, page.text[-500:]
    assert_text_only(page.text)
    text = html.unescape(page.text)
    for element, value in (("prompt", row["prompt"]), ("completion", row["completion"]), ("stdout", XSS)):
        assert f'<pre id="{element}">{value}</pre>' in text
    assert f'<pre id="test">{row["test"]}</pre>' in text and '<pre id="stderr">AssertionError</pre>' in text
    assert '<td id="verdict">fail</td>' in text and '<td id="exit-reason">error</td>' in text
    assert '<td id="duration">0.25 s</td>' in text and "seed 7" in text
    assert '<a href="/runs/runs/tiny/checkpoints/1">runs/tiny step 1</a>' in text
    (again,) = re.findall(r'<a id="playground-link" href="([^"]*)">', page.text)
    query = parse_qs(urlsplit(html.unescape(again)).query)
    assert query["prompt"] == [row["prompt"]] and query["ckpt"] == ["runs/tiny@1"] and query["seed"] == ["7"]
    assert client.get("/samples/nope").status_code == 404


def test_two_checkpoints_compared_changed_verdicts_first(client, samples_home):
    first, second = (str(c) for c in samples_home.checkpoints)
    picker = client.get(f"/samples/compare?suite={SUITE}")
    assert picker.status_code == 200 and 'id="comparison"' not in picker.text
    assert f'<option value="{second}" selected>runs/tiny step 2</option>' in picker.text  # B: the newest

    page = client.get(f"/samples/compare?suite={SUITE}&a={first}&b={second}")
    assert page.status_code == 200, page.text[-500:]
    tasks = re.findall(r'<tr class="task" data-change="([^"]*)"><td>([^<\n]*)', html.unescape(page.text))
    assert tasks == [
        ("fail → pass", "HumanEval/0"),
        ("fail → pass", "HumanEval/10"),  # after /0: task ids in number order
        ("pass → fail", "HumanEval/1"),
        ("same", "HumanEval/2"),
        ("only A", "HumanEval/3"),
    ]
    assert_text_only(page.text)
    task_zero = html.unescape(page.text.split('data-change="fail → pass"')[1])
    assert f"{XSS} step step-1 sample 0" in task_zero and f"{XSS} step step-2 sample 0" in task_zero
    assert "pass (2/2)" in html.unescape(page.text) and "pass (1/2)" in html.unescape(page.text)

    for query, status, says in (
        (f"suite={SUITE}&a={first}&b={first}", 400, "two different checkpoints"),
        (f"suite={SUITE}&a=/elsewhere&b={second}", 404, "has no samples of suite"),
        (f"suite=nope&a={first}&b={second}", 404, "has no samples of suite 'nope'"),
    ):
        refused = client.get(f"/samples/compare?{query}")
        assert refused.status_code == status and says in html.unescape(refused.text), query


def test_run_and_checkpoint_pages_and_home_link_the_inspection_pages(client, samples_home):
    home = client.get("/").text
    for target in ("/playground", "/samples", "/samples/compare", "/ratings", "/ratings/leaderboard"):
        assert f'href="{target}"' in home.split('id="inspect-links"')[1], target
        assert client.get(target).status_code == 200, target
    run = client.get("/runs/runs/tiny").text.split('id="inspect-run"')[1].split("</p>")[0]
    links = [html.unescape(h) for h in re.findall(r'href="([^"]*)"', run)]
    assert links[0] == "/samples?" + "run=" + str(samples_home.checkpoints[0].parent.parent).replace("/", "%2F")
    assert parse_qs(urlsplit(links[1]).query)["ckpt"] == ["runs/tiny@1", "runs/tiny@2"]
    samples_of_run = client.get(links[0])
    assert listed(samples_of_run.text) == in_order(samples_home.rows)
    checkpoint = client.get("/runs/runs/tiny/checkpoints/2").text.split('id="inspect-checkpoint"')[1].split("</p>")[0]
    playground, of_checkpoint = (html.unescape(h) for h in re.findall(r'href="([^"]*)"', checkpoint))
    assert parse_qs(urlsplit(playground).query)["ckpt"] == ["runs/tiny@2"]
    at_two = [r for r in samples_home.rows if r["checkpoint"] == str(samples_home.checkpoints[1])]
    assert listed(client.get(of_checkpoint).text) == in_order(at_two)
