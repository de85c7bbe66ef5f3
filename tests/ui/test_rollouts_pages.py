"""The pages over rl.rollouts: an RL run's rollouts filtered and paged, one rollout with its task's
prompt (from the run's own rl.tasks snapshot, or the arithmetic family's id), its completion and
test output as text; and an RL checkpoint's page showing its rl lineage with links that lead on."""

from __future__ import annotations

import html
import re
import shutil

import pytest
from starlette.testclient import TestClient

from rl.rollouts_table import KINDS
from tests.ui.inspected import XSS
from tests.ui.paging import page_through
from tests.ui.rl_home import ARITHMETIC_TASK, PROMPTS, RLHome, make_rl_home
from ui import rollouts
from ui.app import create_app
from ui.samples import task_order
from ui.sources import Sources


@pytest.fixture
def client(factory_home):
    return TestClient(create_app(Sources(None, [factory_home])))


@pytest.fixture
def rl_home(catalog, factory_home) -> RLHome:
    return make_rl_home(factory_home, catalog)


def listed(page: str) -> list[str]:
    return re.findall(r'<a class="rollout" href="/rollouts/([0-9a-f]+)">', page)


def in_order(rows: list[dict]) -> list[str]:
    ordered = sorted(
        rows,
        key=lambda r: (r["run_id"], r["step"], KINDS.index(r["kind"]), task_order(r["task_id"]), r["sample_index"]),
    )
    return [r["rollout_id"] for r in ordered]


def test_no_rollouts_table_yet(client):
    page = client.get("/rollouts")
    assert page.status_code == 200 and "No <code>rl.rollouts</code> table yet" in page.text
    assert client.get("/rollouts/abc").status_code == 404


def test_rollouts_are_filtered_by_run_kind_step_task_and_outcome(client, rl_home):
    rows = rl_home.rows
    everything = client.get("/rollouts")
    assert everything.status_code == 200 and listed(everything.text) == in_order(rows)
    assert f"{len(rows)} rollouts" in everything.text
    ours = [r for r in rows if r["run_id"] == rl_home.run_id]
    cases = {
        f"run={rl_home.run_id}": ours,
        f"run={rl_home.arithmetic_run_id}": [r for r in rows if r["task_id"] == ARITHMETIC_TASK],
        "kind=heldout": [r for r in rows if r["kind"] == "heldout"],
        f"run={rl_home.run_id}&kind=train&step=2": [r for r in ours if r["kind"] == "train" and r["step"] == 2],
        "step=0": [r for r in rows if r["step"] == 0],
        "task=t-clamp&outcome=partial": [r for r in rows if r["task_id"] == "t-clamp" and r["outcome"] == "partial"],
        "outcome=syntax-error": [r for r in rows if r["outcome"] == "syntax-error"],
        "task=nope": [],
    }
    for query, expected in cases.items():
        page = client.get(f"/rollouts?{query}")
        assert page.status_code == 200, page.text[-300:]
        assert listed(page.text) == in_order(expected) and (expected or "no rollout matches" in page.text), query
    (partial,) = [r for r in ours if r["kind"] == "train" and r["step"] == 1 and r["task_id"] == "t-add"][1:2]
    row = client.get(f"/rollouts?run={rl_home.run_id}&step=1&task=t-add&outcome=partial").text
    assert '<td class="reward">0.5</td><td class="passed">1/2</td><td class="outcome">partial</td>' in row
    assert listed(row) == [partial["rollout_id"]]
    runs = everything.text.split('name="run"')[1].split("</select>")[0]
    assert f'value="{rl_home.run_id}">runs/rl (rl-run-1)<' in runs  # under the UI's folders: its key
    assert f'value="{rl_home.arithmetic_run_id}">{rl_home.start.parents[3]}/elsewhere/arith' in runs


def test_rollouts_page_through_keeping_their_filters(client, rl_home, monkeypatch):
    monkeypatch.setattr(rollouts, "PAGE_SIZE", 2)
    trained = in_order([r for r in rl_home.rows if r["run_id"] == rl_home.run_id and r["kind"] == "train"])
    kept = {"run": rl_home.run_id, "kind": "train"}
    seen = page_through(client, f"/rollouts?run={rl_home.run_id}&kind=train", listed, kept)
    assert seen == trained and len(trained) > 2
    for bad, says in (
        ("kind=eval", "kind must be one of train, heldout"),
        ("step=two", "step must be a whole number"),
        ("step=%C2%B2", "step must be a whole number"),  # "²": a digit to str.isdigit, not to int
        ("page_no=-1", "page_no"),
    ):
        refused = client.get(f"/rollouts?{bad}")
        assert refused.status_code == 400 and says in html.unescape(refused.text), bad


def test_a_rollout_shows_its_tasks_prompt_completion_and_output_as_text(client, rl_home):
    (row,) = [
        r for r in rl_home.rows if (r["kind"], r["step"], r["task_id"], r["sample_index"]) == ("train", 2, "t-add", 1)
    ]
    page = client.get(f"/rollouts/{row['rollout_id']}")
    assert page.status_code == 200, page.text[-500:]
    assert "<script" not in page.text and "<b>" not in page.text and "<img src=x" not in page.text
    text = html.unescape(page.text)
    # The prompt of the snapshot the run drew from, not of the table's current one (it changed them).
    assert f'<pre id="prompt">{PROMPTS["t-add"]}</pre>' in text and f"from rl.tasks@{rl_home.tasks_snapshot}" in text
    assert f'<pre id="completion">    return {XSS} # train 2 t-add 1\n</pre>' in text
    assert f'<pre id="output">{XSS} output of t-add 1</pre>' in text
    assert '<td id="reward">0.5</td>' in text and '<td id="passed">1/2</td>' in text
    assert '<td id="outcome">partial</td>' in text and '<td id="seed">102</td>' in text
    assert '<a id="run-link" href="/runs/runs/rl">runs/rl</a>' in text
    assert f'<a id="task-rollouts" href="/rollouts?run={rl_home.run_id}&task=t-add">' in text

    (greedy,) = [r for r in rl_home.rows if r["kind"] == "heldout" and r["task_id"] == "t-clamp"]
    assert '<td id="seed">none (greedy)</td>' in client.get(f"/rollouts/{greedy['rollout_id']}").text
    assert client.get("/rollouts/nope").status_code == 404


def test_a_generated_familys_prompt_comes_from_its_id(client, rl_home):
    (row, _) = [r for r in rl_home.rows if r["task_id"] == ARITHMETIC_TASK]
    text = html.unescape(client.get(f"/rollouts/{row['rollout_id']}").text)
    assert '<pre id="prompt"># Return n times 7.\ng = lambda n:</pre>' in text
    assert 'id="run-link"' not in text  # its folder is not under the UI's folders: shown, not linked


def test_a_prompt_not_at_hand_says_why(client, rl_home, catalog):
    catalog.drop_table(("rl", "tasks"))
    (row,) = [r for r in rl_home.rows if r["kind"] == "heldout" and r["task_id"] == "t-add"]
    page = html.unescape(client.get(f"/rollouts/{row['rollout_id']}").text)
    assert f'<p class="muted" id="no-prompt">not at hand: rl.tasks@{rl_home.tasks_snapshot} is no longer' in page
    assert 'id="completion"' in page


def test_an_rl_checkpoints_page_shows_its_rl_lineage_and_links_on(client, rl_home):
    page = client.get("/runs/runs/rl/checkpoints/2")
    assert page.status_code == 200, page.text[-500:]
    section = html.unescape(page.text.split('id="rl-lineage"')[1].split("</ul>")[0])
    links = dict(re.findall(r'<a (?:id|class)="([^"]+)" href="([^"]*)">', section))
    assert links == {
        "rl-start": "/runs/runs/tiny/checkpoints/2",
        "rl-tasks": f"/tables/rl.tasks/snapshots/{rl_home.tasks_snapshot}",
        "rl-tasks-input": f"/tables/filtered.text/snapshots/{rl_home.raw_snapshot}",
        "rl-rollouts": f"/rollouts?run={rl_home.run_id}",
        "rl-rollouts-snapshot": f"/tables/rl.rollouts/snapshots/{rl_home.rollouts_snapshot}",
    }
    assert "built by rl-build-test" in section and "2 trained on, 0 held out" in section
    assert "seed 3, 2 steps of 2 tasks × 3 samples, kl_beta 0.04, lr 1e-05" in section
    for target in links.values():
        assert client.get(target).status_code == 200, target
    shown = listed(client.get(links["rl-rollouts"]).text)
    assert shown == in_order([r for r in rl_home.rows if r["run_id"] == rl_home.run_id])
    before = client.get("/runs/runs/tiny/checkpoints/2").text
    assert 'id="rl-lineage"' not in before  # a pre-training checkpoint has none


def test_a_start_no_longer_under_the_uis_folders_is_named_not_linked(client, rl_home, factory_home):
    shutil.move(factory_home / "runs" / "tiny", factory_home / "moved")
    page = html.unescape(client.get("/runs/runs/rl/checkpoints/2").text)
    assert f'<span class="mono" id="rl-start">{rl_home.start}</span> (step 2)' in page


def test_the_nav_and_home_link_the_rollouts(client, rl_home):
    home = client.get("/").text
    assert '<a href="/rollouts">rollouts</a>' in home.split("</header>")[0]
    assert 'href="/rollouts"' in home.split('id="inspect-links"')[1].split("</ul>")[0]


def test_the_load_benchmark_finds_the_rollouts_pages_only_where_there_are_rollouts(client, factory_home, monkeypatch):
    from benchmarks.ui.load import SAMPLES, discover

    monkeypatch.setenv("FACTORY_HOME", str(factory_home))  # discover() sets it: restored after the test
    assert not {"rollouts", "rollout"} & set(discover(factory_home))
    make_rl_home(factory_home, Sources(None, [factory_home]).catalog)
    pages = discover(factory_home)
    assert len(pages["rollout"]) == SAMPLES and any("kind=heldout" in url for url in pages["rollouts"])
    for url in pages["rollouts"] + pages["rollout"]:
        assert client.get(url).status_code == 200, url
