"""The UI in a real browser: headless Chromium (Debian's) driven by Playwright, on a factory the
real jobs built (ingest, dedup, filter, pin, train; tests/ui/conftest.py). Screenshots land in a
temporary folder, or in $FACTORY_UI_SCREENSHOTS (how docs/images/ was made)."""

from __future__ import annotations

import re

import pytest

from tests.ui.browser import MARKS, snap
from tests.ui.built_factory import BuiltFactory, Server

pytestmark = MARKS


@pytest.fixture(scope="module")
def base_url(factory: BuiltFactory):
    with Server(factory.home) as url:
        yield url


def test_tables_and_snapshots(page, shots):
    page.goto("/")
    tables = page.locator("#tables").inner_text()
    for name in ("raw.web", "dedup.web", "dedup.web_clusters", "filtered.web", "filtered.quarantine", "evals.results"):
        assert name in tables
    assert "v1" in page.locator("#tables tr", has_text="filtered.web").first.inner_text()  # the filter's tag
    snap(page, shots, "tables")
    page.click("#tables a:text-is('filtered.web')")
    rows = page.locator("#snapshots").inner_text()
    assert "filter" in rows and "ui-filter" in rows and "documents-in=" in rows
    page.locator("#snapshots a").first.click()
    assert "ui-filter" in page.locator("#factory").inner_text()


def test_planted_markup_is_shown_as_text_and_never_runs(page, factory, shots):
    page.goto("/tables/raw.web/snapshots/main/documents?q=Notes")
    table = page.locator("#documents").inner_text()
    assert "<script>window.__xss = 1;" in table  # shown, as text
    page.click(f"#documents a:text-is('{factory.xss_doc_id}')")
    text = page.locator("#text").inner_text()
    assert text.startswith("Notes <script>window.__xss = 1;") and 'onerror="window.__xss = 2' in text
    assert "javascript:window.__xss = 3" in text
    snap(page, shots, "document")
    assert page.locator("#planted-link").count() == 0 and page.locator("img[src=x]").count() == 0
    assert page.evaluate("() => window.__xss") is None
    assert not [m for m in page.console_messages_seen if "XSS-RAN" in m or "Content Security Policy" in m]


def test_documents_page_through_a_snapshot(page):
    page.goto("/tables/raw.web/snapshots/main/documents")
    assert "read 1 of 1 data file" in page.locator("#read-stats").inner_text()
    first = page.locator("#documents tr").count()
    page.click("#next")
    assert "page 2" in page.content() and page.locator("#documents tr").count() >= 2
    assert page.locator("#documents tr").count() <= first


def test_a_near_duplicate_cluster_side_by_side(page, factory, shots):
    page.goto("/tables/dedup.web_clusters/snapshots/main/clusters")
    cluster = min(factory.near_original, factory.near_copy)  # a cluster is named by its smallest doc_id
    page.click(f"a.cluster:text-is('{cluster}')")
    members = page.locator(".member")
    assert members.count() == 2
    removed = page.locator(".member", has_text="removed")
    jaccard = float(removed.locator(".jaccard").inner_text())
    estimate = float(removed.locator(".minhash").inner_text())
    assert 0.9 < jaccard < 1.0 and abs(estimate - jaccard) < 0.15
    # Recomputed by the dedup job's own code under its recorded parameters: the job's numbers.
    assert removed.locator(".recorded").inner_text() == f"{jaccard:.3f} / {estimate:.3f}"
    changed = removed.locator(".diff .add, .diff .del").all_inner_texts()
    assert any("The lantern stayed lit." in line for line in changed)
    snap(page, shots, "cluster")


def test_quarantine_counts_samples_and_a_documents_metrics(page, shots):
    page.goto("/tables/filtered.quarantine/snapshots/main/quarantine")
    counts = page.locator("#counts").inner_text()
    assert re.search(r"gopher_repetition\s+dup_line_frac\s+1", counts)
    assert re.search(r"gopher_quality\s+gopher_below_avg_threshold\s+1", counts)
    snap(page, shots, "quarantine")
    page.locator("#reason-dup_line_frac + table a").first.click()
    metrics = page.locator("table.metrics").inner_text()
    assert "duplicate_line_fraction\t0.91" in metrics  # 11 of its 12 lines repeat
    assert "Buy the best tools" in page.locator("pre.record").inner_text()


def test_a_run_from_its_curves_through_its_checkpoint_back_to_the_raw_file(page, factory, shots):
    page.goto("/")
    page.click(f"a:text-is('{factory.run_key}')")
    titles = page.locator("#plots img").evaluate_all("images => images.map(i => i.title)")
    assert titles == [
        "training loss",
        "learning rate",
        "tokens/s",
        "data-wait fraction",
        "eval loss per component",
        "heldout (evals.results)",
    ]
    assert all(page.locator("#plots img").evaluate_all("images => images.map(i => i.naturalWidth > 100)"))
    assert page.locator("#checkpoints a.checkpoint").all_inner_texts() == ["step 2", "step 4"]
    assert "heldout" in page.locator("#eval-results").inner_text()
    snap(page, shots, "run")

    page.click("a.checkpoint:text-is('step 4')")
    tree = page.locator("#lineage-tree").inner_text()
    assert "filter → filtered.web" in tree and "ingest → raw.web" in tree and str(factory.raw_file) in tree
    page.click("#lineage-tree a.component-snapshot")  # filtered.web@… : its page and lineage graph
    stages = page.locator("#lineage a.node").evaluate_all("nodes => nodes.map(n => n.dataset.stage)")
    assert {"raw input", "ingest", "dedup", "filter", "manifest", "run", "checkpoint", "eval"} <= set(stages)
    snap(page, shots, "lineage")

    page.locator("#lineage a.node[data-stage=dedup]").click()
    assert "dedup.web@" in page.locator("h1").inner_text()
    page.locator("a.input-table").first.click()  # the dedup's input: raw.web@…
    assert "raw.web@" in page.locator("h1").inner_text() and "ui-ingest" in page.locator("#factory").inner_text()
    assert page.locator("#inputs .raw-input").inner_text().endswith(str(factory.raw_file))


def test_the_lineage_graph_fits_the_page_eval_column_and_all(page, factory):
    page.goto(f"/runs/{factory.run_key}/checkpoints/4")
    page.click("#lineage-tree a.component-snapshot")  # filtered.web@…: raw input through eval, nine columns
    evals = page.locator("#lineage a.node[data-stage=eval]")
    assert evals.count() >= 1
    width = page.evaluate("() => document.documentElement.clientWidth")
    for box in evals.evaluate_all("nodes => nodes.map(n => n.getBoundingClientRect().toJSON())"):
        assert box["left"] >= 0 and box["right"] <= width, (box, width)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width  # nothing to scroll sideways to


def test_manifest_and_sweeps(page, shots):
    page.goto("/")
    page.click("#manifests ~ ul a")
    assert "web · weight 1.0000" in page.locator("h2").first.inner_text()
    assert page.locator("table.files tr").count() >= 2
    snap(page, shots, "manifest")
    page.click("a.component-snapshot")
    assert "filtered.web@" in page.locator("h1").inner_text()
    page.goto("/sweeps")
    assert "lr-sweep" in page.content() and "0.003" in page.locator("table.trials").inner_text()
    page.click("table.trials th a:text-is('final_loss')")  # compare trials: best first
    trials = page.locator("table.trials tr td:first-child").all_inner_texts()
    assert [t.strip() for t in trials] == ["lr-sweep", "lr-sweep"]
    assert page.locator("table.trials tr").nth(1).inner_text().split("\t")[1] == "t1"  # final_loss 4.1 < 4.4


def test_from_home_to_a_decision_and_on_to_its_evidence(page, factory, shots):
    page.goto("/")
    page.click("#decisions-link")
    assert page.locator("h1").inner_text() == "Decisions"
    verdicts = page.locator("table.decisions a.decision").all_inner_texts()
    assert verdicts == ["adopted", "determined", "refused", "promoted"]  # newest first
    reasons = page.locator("table.decisions td.reason").all_inner_texts()
    assert reasons[2].startswith("Notes <script>window.__xss = 1;")  # a reason holding markup: text
    snap(page, shots, "decisions")

    page.select_option("select[name=kind]", "refinement-gate")
    page.click("#filter button")
    assert page.locator("table.decisions a.decision").all_inner_texts() == ["refused", "promoted"]
    page.click("table.decisions a.decision:text-is('promoted')")
    assert page.locator("#verdict").inner_text() == "promoted"
    assert page.locator("#change").inner_text().startswith("none → @")
    seeds = page.locator("#by-seed tr").all_inner_texts()
    assert seeds[0].split() == ["seed", "base", "candidate", "difference"] and seeds[1].split() == [
        "1",
        "5.125",
        "5",
        "-0.125",
    ]
    assert page.locator("#comparisons .p-value").inner_text() == "0.4125"
    snap(page, shots, "decision")

    page.click("#sweep-link")  # the evidence: the trials the gate weighed
    assert page.locator("h1").inner_text() == "Sweeps: lr-sweep"
    assert [t.strip() for t in page.locator("table.trials tr td:nth-child(2)").all_inner_texts()] == ["t1", "t2"]
    page.go_back()
    page.locator("#after a.snapshot-link").click()  # the snapshot it promoted
    assert page.locator("h1").inner_text().startswith("filtered.web@") and "v1" in page.locator("p").first.inner_text()

    page.goto("/decisions?kind=mixture")
    page.click("table.decisions a.decision")
    page.click("#after a.manifest-link")  # the manifest the mixture decision made
    assert "web · weight 1.0000" in page.locator("h2").first.inner_text()
    page.goto(f"/runs/{factory.run_key}/checkpoints/4")
    shaped = page.locator("#checkpoint-decisions a.decision").all_inner_texts()
    assert shaped == ["refinement-gate web: promoted", "mixture web-mix: determined", "ablation lr: adopted"]
    assert page.evaluate("() => window.__xss") is None
    assert not [m for m in page.console_messages_seen if "XSS-RAN" in m]


def test_bad_links_give_clear_pages(page):
    for url, status, says in [
        ("/tables/raw.nope", 404, "does not exist"),
        ("/runs/runs/missing", 404, "no training run"),
    ]:
        response = page.goto(url)
        assert response.status == status and says in page.locator("main").inner_text()


def test_screenshots_folder_holds_the_main_pages(shots):
    names = {p.stem for p in shots.glob("*.png")}
    assert {"tables", "document", "cluster", "quarantine", "run", "lineage"} <= names
