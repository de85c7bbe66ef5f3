"""Pages over files a user or another tool wrote (a checkpoint's lineage.json, a run's
config.resolved.json, metrics.jsonl and factory.json): a crafted or damaged one is named on a clear
page, escaped, or passed over, never a 500."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from lakehouse.catalog import ensure_table
from lakehouse.decisions import record_decision
from lakehouse.schemas import CLUSTERS_SCHEMA
from tests.decisions import gate_decision, hand_made_checkpoint
from tests.rl_section import CRAFTED_RL, rl_section
from tests.ui.rl_home import make_rl_home
from ui.app import create_app
from ui.sources import RunDir, Sources, run_manifest_fingerprint

FINGERPRINT = "sha256:" + "ab" * 32
RUN = {"table": "raw.a", "snapshot_id": 5, "job": "ingest", "run_id": "ing-1", "committed_at": "2026-01-01T00:00:00",
       "stats": {"kept": 3}, "inputs": [{"uri": "file:///src/a"}]}  # fmt: skip


@pytest.fixture
def client(catalog, factory_home) -> TestClient:
    return TestClient(create_app(Sources(None, [factory_home])), raise_server_exceptions=False)


def _run_with_checkpoints(factory_home: Path, name: str = "tiny") -> Path:
    """A run folder with two hand-made checkpoints (steps 2 and 4) of a one-component manifest,
    each component with one pipeline run behind it."""
    manifest = {"name": "m", "fingerprint": FINGERPRINT,
                "components": [{"name": "a", "table": "raw.a", "snapshot_id": 5, "weight": 1.0}]}  # fmt: skip
    (factory_home / "mixtures").mkdir(parents=True, exist_ok=True)
    manifest_path = factory_home / "mixtures" / "manifest.json"
    manifest_path.write_text(json.dumps(manifest))
    run_dir = factory_home / "runs" / name
    for step in (2, 4):
        lineage_file = hand_made_checkpoint(run_dir, manifest_path, step) / "lineage.json"
        lineage = json.loads(lineage_file.read_text())
        lineage["components"][0]["runs"] = [RUN]
        lineage_file.write_text(json.dumps(lineage))
    return run_dir


def _changed(change: Callable[[dict], None]) -> Callable[[str], str]:
    def crafted(text: str) -> str:
        lineage = json.loads(text)
        change(lineage)
        return json.dumps(lineage)

    return crafted


def _component(lineage: dict) -> dict:
    return lineage["components"][0]


# Each: how the newest checkpoint's lineage.json is damaged, and what its page says of it.
DAMAGED = {
    "not JSON": (lambda _text: '{"step": 4, "manifest":', "is not the JSON a checkpoint's lineage is"),
    "not UTF-8": (lambda _text: "\udcff", "is not the JSON a checkpoint's lineage is"),
    "a list": (lambda _text: "[]", "is not a checkpoint's lineage (no manifest in it)"),
    "manifest a string": (_changed(lambda d: d.update(manifest="m.json")), "no manifest in it"),
    "no tokenizer": (_changed(lambda d: d.pop("tokenizer")), "lacks tokenizer of"),
    "step a string": (_changed(lambda d: d.update(step="4")), "lacks step of"),
    "components a string": (_changed(lambda d: d.update(components="raw.a@5")), "lacks components (a list)"),
    "component a number": (_changed(lambda d: d.update(components=[5])), "lacks components[0] (an object)"),
    "component without table": (_changed(lambda d: _component(d).pop("table")), "lacks components[0].table of"),
    "runs a number": (_changed(lambda d: _component(d).update(runs=3)), "lacks components[0].runs (a list)"),
    "snapshot id a string": (
        _changed(lambda d: _component(d).update(snapshot_id="five")),
        "lacks components[0].snapshot_id (an integer)",
    ),
    "a run's table a number": (
        _changed(lambda d: _component(d)["runs"][0].update(table=7)),
        "lacks components[0].runs[0].table (a string)",
    ),
    "a run's stats a list": (
        _changed(lambda d: _component(d)["runs"][0].update(stats=[])),
        "lacks components[0].runs[0].stats (an object)",
    ),
    "tokenizer hash a number": (
        _changed(lambda d: d["tokenizer"].update(sha256=12345)),
        "lacks tokenizer.sha256 (a string) of",
    ),
    # An RL checkpoint's own part (rl/learner.py): checked by rl.lineage, as factory lineage checks it.
    **{
        f"rl: {name}": (_changed(lambda d, change=change: d.update(rl=rl_section(change))), f"lacks {named}")
        for name, (change, named) in CRAFTED_RL.items()
    },
    "rl: tasks' inputs not JSON": (
        _changed(lambda d: d.update(rl=rl_section(lambda rl: rl["tasks"].update(inputs="[{")))),
        "lineage.json at rl.tasks.inputs is not a JSON list of inputs",
    ),
}


@pytest.mark.parametrize("damage", DAMAGED)
def test_a_damaged_lineage_is_named_on_its_checkpoints_page_and_row(client, factory_home, damage):
    crafted, says = DAMAGED[damage]
    lineage_file = _run_with_checkpoints(factory_home) / "checkpoints" / "step-4" / "lineage.json"
    text = crafted(lineage_file.read_text())
    lineage_file.write_bytes(text.encode("utf-8", errors="surrogateescape"))

    page = client.get("/runs/runs/tiny/checkpoints/4")
    assert page.status_code == 400, (damage, page.status_code, page.text[-800:])
    shown = html.unescape(page.text)
    assert f"{lineage_file} " in shown and says in shown, shown[-800:]
    assert "Traceback" not in page.text and "internal error" not in page.text

    # The run's page names it in that checkpoint's row, and still shows the other checkpoint.
    run = client.get("/runs/runs/tiny")
    assert run.status_code == 200, run.text[-800:]
    row = html.unescape(run.text.split('href="/runs/runs/tiny/checkpoints/4"')[1].split("</tr>")[0])
    assert 'class="error lineage-error"' in row and says in row, row
    older = run.text.split('href="/runs/runs/tiny/checkpoints/2"')[1].split("</tr>")[0]
    assert f'href="/manifests/{FINGERPRINT}"' in older and 'href="/tables/raw.a/snapshots/5"' in older


def test_a_complete_checkpoint_without_its_lineage_is_named(client, factory_home):
    lineage_file = _run_with_checkpoints(factory_home) / "checkpoints" / "step-4" / "lineage.json"
    lineage_file.unlink()
    page = client.get("/runs/runs/tiny/checkpoints/4")
    assert page.status_code == 400 and f"cannot read {lineage_file}" in html.unescape(page.text), page.text[-800:]


def test_the_message_naming_a_damaged_lineage_is_escaped(client, factory_home):
    run_dir = _run_with_checkpoints(factory_home, "<i>x")  # the message names the file, in the run's folder
    (run_dir / "checkpoints" / "step-4" / "lineage.json").write_text("{")
    page = client.get("/runs/runs/%3Ci%3Ex/checkpoints/4")
    assert page.status_code == 400 and "&lt;i&gt;x/checkpoints/step-4/lineage.json is not the JSON" in page.text
    assert "<i>" not in page.text


def test_a_runs_manifest_is_found_past_a_damaged_newest_lineage(catalog, factory_home):
    run_dir = _run_with_checkpoints(factory_home)
    (run_dir / "checkpoints" / "step-4" / "lineage.json").write_text(json.dumps({"manifest": "m.json"}))
    assert run_manifest_fingerprint(RunDir("runs/tiny", run_dir)) == FINGERPRINT


def test_a_run_config_whose_data_is_no_object_leaves_the_home_page_up(client, factory_home):
    run_dir = _run_with_checkpoints(factory_home)
    (run_dir / "config.resolved.json").write_text(json.dumps({"data": "manifest.json"}))
    home = client.get("/")
    assert home.status_code == 200 and 'href="/runs/runs/tiny"' in home.text, home.text[-800:]


def test_metrics_with_bytes_that_are_no_utf8_leave_the_runs_page_up(client, factory_home):
    run_dir = _run_with_checkpoints(factory_home)
    record = json.dumps({"kind": "train", "step": 3, "loss": 2.5}).encode()
    (run_dir / "metrics.jsonl").write_bytes(record + b"\n" + record.replace(b"3", b"4")[:-4] + b"\xc3")
    page = client.get("/runs/runs/tiny")
    assert page.status_code == 200 and 'id="last-step">step 3 ' in page.text, page.text[-800:]


def test_a_run_record_whose_decisions_are_no_list_leaves_the_decisions_page_up(client, catalog, factory_home):
    run_dir = _run_with_checkpoints(factory_home)
    decision = gate_decision()
    record_decision(catalog, decision)
    (run_dir / "factory.json").write_text(json.dumps({"run": "tiny", "decisions": 5}))
    page = client.get(f"/decisions/{decision['decision_id']}")
    assert page.status_code == 200, page.text[-800:]


def _commit_by_hand(table, rows: list[dict], summary: dict[str, str]) -> None:
    """Rows committed as another tool would: pyiceberg's append, the summary written by hand."""
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()), snapshot_properties=summary)


# Each: a hand-written summary property, and what the refusal says of it.
HAND_WRITTEN = {
    "inputs not JSON": ({"factory.inputs": "[{"}, "factory.inputs is not a JSON list of inputs"),
    "inputs an object": ({"factory.inputs": '{"table": "raw.a"}'}, "factory.inputs holds a dict, not a JSON list"),
    "an input a number": ({"factory.inputs": "[5]"}, "factory.inputs: input [0] is 5, not an object"),
    "an input's snapshot a word": (
        {"factory.inputs": '[{"table": "raw.a", "snapshot_id": "five"}]'},
        "factory.inputs: input [0] is",
    ),
    "params a list": ({"factory.params": "[1]"}, "factory.params holds a list, not a JSON object of parameters"),
}


def _hand_made_clusters(catalog, summary: dict[str, str]) -> None:
    table = ensure_table(catalog, ("dedup", "hand_clusters"), CLUSTERS_SCHEMA)
    row = {"doc_id": "d1", "cluster_id": "d1", "kept": True, "cluster_size": 2, "against": False}
    _commit_by_hand(table, [row, {**row, "doc_id": "d2", "kept": False, "duplicate_of": "d1"}], summary)


@pytest.mark.parametrize("written", HAND_WRITTEN)
def test_a_clusters_snapshot_with_a_hand_written_summary_is_named(client, catalog, written):
    summary, says = HAND_WRITTEN[written]
    _hand_made_clusters(catalog, summary)
    snapshot_id = catalog.load_table(("dedup", "hand_clusters")).current_snapshot().snapshot_id
    page = client.get("/tables/dedup.hand_clusters/snapshots/main/clusters/d1")
    assert page.status_code == 400, (written, page.status_code, page.text[-800:])
    shown = html.unescape(page.text)
    assert f"dedup.hand_clusters@{snapshot_id}'s {says}" in shown, shown[-800:]
    assert "another tool" in shown and "Traceback" not in shown


def test_a_clusters_snapshot_whose_summary_records_no_run_shows_its_members(client, catalog):
    _hand_made_clusters(catalog, {"factory.params": '{"ngram": 3}', "factory.inputs": '[{"uri": "file:///a"}]'})
    page = client.get("/tables/dedup.hand_clusters/snapshots/main/clusters/d1")
    assert page.status_code == 200 and "d2" in page.text, page.text[-800:]
    _hand_made_clusters(catalog, {})  # no factory.* at all: nothing to read the texts from
    assert client.get("/tables/dedup.hand_clusters/snapshots/main/clusters/d1").status_code == 200


@pytest.mark.parametrize("written", [w for w in HAND_WRITTEN if "params" not in w])
def test_a_rollouts_snapshot_with_a_hand_written_summary_leaves_the_rollouts_page_up(
    client, catalog, factory_home, written
):
    summary, says = HAND_WRITTEN[written]
    home = make_rl_home(factory_home, catalog)
    table = catalog.load_table(("rl", "rollouts"))
    task_row = next(r for r in home.rows if r["task_id"] == "t-add")  # a table's task: its prompt is looked up
    row = {**task_row, "run_id": "hand-run", "rollout_id": "f" * 32}
    _commit_by_hand(table, [row], {"factory.rl-run-id": "hand-run", **summary})
    snapshot_id = catalog.load_table(("rl", "rollouts")).current_snapshot().snapshot_id
    page = client.get(f"/rollouts/{'f' * 32}")
    assert page.status_code == 200, (written, page.status_code, page.text[-800:])
    shown = html.unescape(page.text)
    assert f'<p class="muted" id="no-prompt">not at hand: rl.rollouts@{snapshot_id}\'s {says}' in shown, shown[-800:]
    assert 'id="completion"' in shown
