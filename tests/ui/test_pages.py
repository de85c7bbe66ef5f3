"""The UI's pages over a catalog made without Spark: paging by seeking, escaping, clear errors."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote

import httpx
import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType
from starlette.testclient import TestClient

from lakehouse.catalog import ensure_table
from lakehouse.decisions import record_decision
from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema
from tests.conftest import run_factory
from tests.corpora import make_table
from tests.decisions import (
    ablation_decision,
    gate_decision,
    hand_made_checkpoint,
    mixture_decision,
    pinned_manifest,
    write_run_record,
)
from tests.ui.served import served_ui
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
    ("/tables/raw.web/snapshots/main/clusters", 400, "raw.web is not a dedup job's clusters"),
    ("/tables/raw.web/snapshots/main/quarantine", 400, "raw.web is not a quarantine"),
    # A dedup output has a cluster_id column, and the decisions a reason, but neither is such a table.
    ("/tables/dedup.web/snapshots/main/clusters", 400, "dedup.web is not a dedup job's clusters"),
    ("/tables/dedup.web/snapshots/main/clusters/abc", 400, "dedup.web is not a dedup job's clusters"),
    ("/tables/factory.decisions/snapshots/main/quarantine", 400, "factory.decisions is not a quarantine"),
    ("/runs/nope", 404, "no training run 'nope'"),
    ("/runs/nope/checkpoints/3", 404, "no training run"),
    ("/manifests/abc", 404, "no manifest"),
    ("/decisions/nope", 404, "no decision 'nope' in factory.decisions"),
    ("/sweeps?sweep=nope", 404, "no trials of sweep 'nope'"),
    ("/no/such/page", 404, "no such page"),
]


def test_bad_requests_get_a_clear_page_never_a_traceback(catalog, client):
    make_table(catalog, "raw.web", 5, files=1)
    dedup_output = Schema(*DOCUMENT_SCHEMA.fields, NestedField(100, "cluster_id", StringType(), required=False))
    ensure_table(catalog, ("dedup", "web"), dedup_output).append(
        pa.Table.from_pylist(
            [{"doc_id": "a", "source": "web", "text": "x", "cluster_id": "a"}], arrow_schema(dedup_output)
        )
    )
    record_decision(catalog, gate_decision())
    snapshot = client.get("/tables/dedup.web/snapshots/main")
    assert (
        snapshot.status_code == 200 and "clusters-link" not in snapshot.text and "quarantine-link" not in snapshot.text
    )
    for url, status, says in BAD_REQUESTS:
        response = client.get(url)
        assert response.status_code == status, f"{url}: {response.status_code} {response.text[-300:]}"
        assert says in html.unescape(response.text), url
        assert "Traceback" not in response.text and 'File "' not in response.text, url


def test_a_table_named_outside_the_factorys_rules_is_listed_but_not_linked(catalog, client):
    """A shared catalog's ``other.web-crawl`` was linked from the home page to pages that refuse it."""
    make_table(catalog, "raw.web", 2, files=1)
    catalog.create_namespace("other")
    for name in ("web-crawl", "Mixed.Case"):
        catalog.create_table(("other", name), DOCUMENT_SCHEMA)
    home = client.get("/")
    assert home.status_code == 200
    assert 'href="/tables/raw.web"' in home.text
    for name in ("other.web-crawl", "other.Mixed.Case"):
        assert f"{name} <span" in home.text and f'href="/tables/{name}"' not in home.text


def test_factory_ui_refuses_a_port_that_is_no_port(factory_home):
    done = run_factory("ui", "--port", "70000")
    assert done.returncode == 2 and "--port must be between 0 and 65535" in done.stderr


@dataclass(frozen=True)
class Decided:
    gate: dict
    refused: dict
    mixture: dict
    ablation: dict
    code: tuple[int, int]  # decontaminated.code's snapshots: the production one, the promoted one
    fingerprint: str
    trial_run: Path


@pytest.fixture
def decided(catalog, factory_home) -> Decided:
    """Decisions of each kind over real tables, a pinned manifest, a run whose factory.json names
    the ablation it took, and the trials of the gate's sweep, one of whose runs is under the UI's
    folders."""
    manifest_path = factory_home / "mixtures" / "main" / "manifest.json"
    manifest, (production, promoted), text = pinned_manifest(
        catalog, manifest_path, code_files=2, weights=(0.625, 0.375)
    )

    trial_run = factory_home / "sweeps" / "gate-code-0a1b" / "runs" / "t1"
    trial_run.mkdir(parents=True)
    (trial_run / "metrics.jsonl").write_text("")
    trials = pa.table(
        {
            "sweep_id": ["gate-code-0a1b", "gate-code-0a1b", "other-sweep"],
            "trial_id": ["t1", "t2", "t9"],
            "run_dir": [str(trial_run), "/elsewhere/t2", "/elsewhere/t9"],
            "final_loss": [5.0, 5.5, 3.0],
        }
    )
    catalog.create_namespace_if_not_exists("experiments")
    catalog.create_table(("experiments", "trials"), trials.schema).append(trials)

    gate = gate_decision("code", production=production, candidate=promoted)
    refused = gate_decision(
        "text",
        "refused",
        table="filtered.text",
        production=text,
        candidate=text + 1,
        reason=f"worse beyond seed noise {XSS}",
        decided_at="2026-01-01T11:00:00+00:00",
    )
    mixture = mixture_decision(
        components={"code": f"decontaminated.code@{promoted}", "text": f"filtered.text@{text}"},
        manifest=str(manifest_path),
        after_fingerprint=manifest.fingerprint,
    )
    ablation = ablation_decision(runs=[str(trial_run)])
    for row in (gate, refused, mixture, ablation):
        assert record_decision(catalog, row) is not None
    run_dir = factory_home / "runs" / "tiny"
    hand_made_checkpoint(run_dir, manifest_path)
    write_run_record(run_dir, "tiny", [ablation["decision_id"]])
    return Decided(gate, refused, mixture, ablation, (production, promoted), manifest.fingerprint, trial_run)


def links(page: str, css_class: str) -> list[str]:
    """The targets of the page's links of ``css_class``, in order, as a browser would request them."""
    return [html.unescape(h) for h in re.findall(rf'<a class="{css_class}" href="([^"]*)"', page)]


def decision_ids(page: str) -> list[str]:
    return [unquote(h.removeprefix("/decisions/")) for h in links(page, "decision")]


def test_no_decisions_yet(client):
    listed = client.get("/decisions")
    assert listed.status_code == 200 and "no decisions recorded yet" in listed.text
    home = client.get("/")
    assert 'id="decisions-link" href="/decisions"' in home.text and "none recorded yet" in home.text


def test_decisions_newest_first_filtered_and_linked_from_home(client, decided):
    everything = [decided.ablation, decided.mixture, decided.refused, decided.gate]  # newest first
    home = client.get("/")
    assert 'href="/decisions"' in home.text.split("</header>")[0]  # the navigation
    assert 'id="decisions-link" href="/decisions">all 4 decisions' in home.text
    assert decision_ids(home.text) == [d["decision_id"] for d in everything]

    listed = client.get("/decisions")
    assert listed.status_code == 200
    assert decision_ids(listed.text) == [d["decision_id"] for d in everything]
    # The real snapshots, not gate_decision's default (11); a real id may well begin with 11.
    assert not re.search(r"@11\b", listed.text) and f"@{decided.code[0]} → @{decided.code[1]}" in listed.text
    assert "+optim.lr=0.001" in listed.text

    gates = client.get("/decisions?kind=refinement-gate")
    assert decision_ids(gates.text) == [decided.refused["decision_id"], decided.gate["decision_id"]]
    assert '<option value="refinement-gate" selected>' in gates.text
    by_subject = client.get("/decisions?subject=text")
    assert decision_ids(by_subject.text) == [decided.refused["decision_id"]]
    # Each kind and subject links to its own filter.
    assert "/decisions?subject=text" in links(listed.text, "subject")
    nothing = client.get("/decisions?kind=mixture&subject=code")
    assert decision_ids(nothing.text) == [] and "no recorded decision matches" in nothing.text


def test_a_gate_decision_shows_its_metrics_by_seed_and_links_to_its_evidence(client, decided):
    page = client.get(f"/decisions/{decided.gate['decision_id']}")
    assert page.status_code == 200, page.text[-500:]
    text = html.unescape(page.text)
    assert decided.gate["reason"] in text and '<span id="verdict">promoted</span>' in text
    seeds = re.findall(r"<tr><td>(\d)</td>(.*?)</tr>", page.text.split('id="by-seed"')[1].split("</table>")[0])
    cells = [(i, re.findall(r'<td class="mono">([^<]*)</td>', row)) for i, row in seeds]
    assert cells == [
        ("1", ["5.125", "5", "-0.125"]),
        ("2", ["5.25", "5.5", "0.25"]),
        ("3", ["5", "4.95", "-0.05"]),
    ]
    comparisons = page.text.split('id="comparisons"')[1].split("</table>")[0]
    assert '<td class="mono p-value">0.4125</td>' in comparisons
    assert '<td class="mono interval">[-0.3375, 0.3708]</td>' in comparisons
    assert "<th>mode</th>" in page.text and "not-worse" in page.text  # the evidence's other facts

    production, promoted = decided.code
    snapshots = links(page.text, "snapshot-link")
    assert f"/tables/decontaminated.code/snapshots/{production}" in snapshots
    assert f"/tables/decontaminated.code/snapshots/{promoted}" in snapshots
    for target in set(snapshots):
        opened = client.get(target)
        assert opened.status_code == 200 and "decontaminated.code" in opened.text, target

    (sweep,) = links(page.text, "evidence-link")
    assert sweep == "/sweeps?sweep=gate-code-0a1b"
    trials = client.get(sweep)
    assert trials.status_code == 200
    assert ">t1<" in trials.text and ">t2<" in trials.text and "t9" not in trials.text  # that sweep only
    assert links(trials.text, "run-link") == ["/runs/sweeps/gate-code-0a1b/runs/t1"]  # the trial's run, found
    assert client.get("/runs/sweeps/gate-code-0a1b/runs/t1").status_code == 200
    sorted_trials = client.get("/sweeps?sweep=gate-code-0a1b&sort=final_loss")
    assert 'href="/sweeps?sweep=gate-code-0a1b&amp;sort=trial_id"' in sorted_trials.text  # sorting keeps the sweep
    assert "other-sweep" in client.get("/sweeps").text


@pytest.mark.engine
def test_the_manifest_page_masks_a_credential_a_data_files_uri_holds(catalog, factory_home):
    # A manifest lists its data files' URIs as the catalog gave them: keys in the userinfo, a signed query.
    path = factory_home / "mixtures" / "manifest.json"
    pinned, _, _ = pinned_manifest(catalog, path)
    uris = [
        "s3://AKIAFAKEKEYID:FAKESECRETKEY@bucket/data/f.parquet",
        "https://a.blob.core.windows.net/c/f.parquet?sv=1&sig=FAKESIGNATURE",
    ]
    components = [
        replace(c, files=(replace(c.files[0], path=uri), *c.files[1:]))
        for c, uri in zip(pinned.components, uris, strict=True)
    ]
    manifest = replace(pinned, components=tuple(components))
    manifest.save(path)
    with served_ui() as url:
        page = httpx.get(f"{url}/manifests/{manifest.fingerprint}", timeout=30)
    assert page.status_code == 200, page.text[-500:]
    text = html.unescape(page.text)
    leaked = [secret for secret in ("AKIAFAKEKEYID", "FAKESECRETKEY", "FAKESIGNATURE") if secret in text]
    assert not leaked, f"the manifest page shows {leaked}"
    assert "s3://***:***@bucket/data/f.parquet" in text and "/c/f.parquet?sv=1&sig=***" in text


def test_a_mixture_decision_links_its_manifest_and_snapshots(client, decided):
    page = client.get(f"/decisions/{decided.mixture['decision_id']}")
    assert page.status_code == 200, page.text[-500:]
    (manifest,) = links(page.text, "manifest-link")  # the one made; the one before is not under the folders
    assert unquote(manifest) == f"/manifests/{decided.fingerprint}"
    assert "(not under the UI's folders)" in page.text and "0f0f0f0f" in page.text
    opened = client.get(manifest)
    assert opened.status_code == 200 and "Manifest main" in opened.text
    components = set(links(page.text, "snapshot-link"))
    assert f"/tables/decontaminated.code/snapshots/{decided.code[1]}" in components
    assert any(target.startswith("/tables/filtered.text/snapshots/") for target in components)
    weights = page.text.split('id="after"')[1].split('class="weights"')[1].split("</table>")[0]
    assert re.findall(r"<td>(\w+)</td><td class=\"mono\">([\d.]+)</td>", weights) == [
        ("code", "0.625"),
        ("text", "0.375"),
    ]
    assert "<th>fit</th>" in page.text and "cv_spearman" in page.text


def test_an_ablation_decision_shows_its_variants_overrides_and_runs(client, decided):
    page = client.get(f"/decisions/{decided.ablation['decision_id']}")
    assert page.status_code == 200, page.text[-500:]
    header = page.text.split('id="by-seed"')[1].split("</tr>")[0]
    assert "<th>base</th><th>low-lr</th>" in header
    comparisons = page.text.split('id="comparisons"')[1].split("</table>")[0]
    assert "<td>low-lr</td>" in comparisons and "-0.25" in comparisons and "<td>yes</td>" in comparisons
    after = page.text.split('id="after"')[1].split("</div>")[0]
    assert "<code>optim.lr=0.001</code>" in after and "<code>train.steps=4</code>" in after
    assert "optim.lr" not in page.text.split('id="before"')[1].split("</div>")[0]
    runs = dict(
        re.findall(r'<a class="run-link" href="([^"]*)">[^<]*</a> <span class="muted">([^<]*)</span>', page.text)
    )
    assert runs == {
        "/runs/runs/tiny": "took this decision",
        "/runs/sweeps/gate-code-0a1b/runs/t1": "weighed as evidence",
    }
    for target in runs:
        assert client.get(target).status_code == 200, target


def test_a_checkpoint_page_names_the_decisions_that_shaped_its_data(client, decided, factory_home):
    page = client.get("/runs/runs/tiny/checkpoints/4")
    assert page.status_code == 200, page.text[-500:]
    section = page.text.split('id="checkpoint-decisions"')[1].split("</ul>")[0]
    assert decision_ids(section) == [d["decision_id"] for d in (decided.gate, decided.mixture, decided.ablation)]
    (factory_home / "runs" / "tiny" / "factory.json").write_text("{broken")
    broken = client.get("/runs/runs/tiny/checkpoints/4")
    assert broken.status_code == 200 and "decisions unavailable" in broken.text and "is not JSON" in broken.text
    superscript = client.get("/runs/runs/tiny/checkpoints/%C2%B2")  # "²": a digit to str.isdigit, not to int
    assert superscript.status_code == 400 and "checkpoint step must be a number" in superscript.text


def test_a_decision_is_escaped_everywhere_it_is_shown(client, decided, catalog):
    # A subject is part of the decision id, a run id: plain by construction. What else a decision
    # holds is free text, and a table name is only as safe as what wrote it.
    marked = gate_decision(
        "marked", table=f"t.{XSS}", reason=XSS, sweep_id=f"s{XSS}", decided_at="2027-01-01T00:00:00+00:00"
    )
    record_decision(catalog, marked)
    pages = {"/": None, "/decisions": None}
    for url in pages:
        pages[url] = client.get(url)
    target = f"/decisions/{marked['decision_id']}"
    assert target in links(pages["/decisions"].text, "decision")
    pages[target] = client.get(target)
    for url, response in pages.items():
        assert response.status_code == 200, (url, response.text[-500:])
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text, url
        assert "<script" not in response.text and "<img src=x" not in response.text, url
        assert 'href="javascript:' not in response.text, url
    (sweep,) = links(pages[target].text, "evidence-link")
    assert unquote(sweep.removeprefix("/sweeps?sweep=")) == f"s{XSS}"


def test_a_snapshot_page_masks_a_credential_its_recorded_inputs_hold(catalog, client):
    # The jobs record inputs redacted; another writer (or an older version) need not have.
    table = make_table(catalog, "raw.web", 3, files=1)
    inputs = [{"uri": "s3://AKIAFAKEKEYID:FAKESECRETKEY@bucket/crawl/a.jsonl", "files": 1}]
    properties = {"factory.job": "ingest", "factory.run_id": "r", "factory.inputs": json.dumps(inputs)}
    table.append(table.scan().to_arrow().slice(0, 1), snapshot_properties=properties)
    snapshot_id = catalog.load_table(("raw", "web")).current_snapshot().snapshot_id
    page = client.get(f"/tables/raw.web/snapshots/{snapshot_id}")
    assert page.status_code == 200, page.text[-500:]
    text = html.unescape(page.text)
    assert "FAKESECRETKEY" not in text and "AKIAFAKEKEYID" not in text
    assert "s3://***:***@bucket/crawl/a.jsonl" in text
