"""The filter job on real Spark (local[2]) and a real SQLite Iceberg catalog."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType

from lakehouse.catalog import ensure_table
from lakehouse.commit import find_run_snapshot, snapshot_stats
from lakehouse.errors import InputError, PublishRefusedError, RunConflictError, ValidationFailedError
from lakehouse.publish import head
from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema
from pipelines.filter import FilterOptions, filter_documents
from quality.config import load_config
from tests.conftest import REPO, run_factory
from tests.documents import prose
from tests.spark_cluster import QUICK_JIT_SUBMIT

# Thresholds chosen so each bad document below is dropped by a different filter, and one
# makes datatrove's Gopher quality filter raise (no minimum word count: it divides by zero).
CONFIG = """
filters = ["size", "gopher_quality", "gopher_repetition", "c4_quality"]
sources = ["web"]
[size]
min_bytes = 1
max_bytes = 20000
[gopher_quality]
min_doc_words = 0
"""

GOOD = {f"good-{i}": prose(i) for i in range(8)}
BAD = {
    "huge": prose(100, sentences=400),  # size: too_large
    "hello": "Hi.",  # gopher_quality: words too short on average
    "spam": "\n".join(["Buy the best tools and seeds with us in the village today."] * 12),  # gopher_repetition
    "lorem": "Lorem ipsum dolor sit amet, with the rest of it.\n" + prose(101),  # c4_quality
    "blank": " \n \n",  # gopher_quality raises ZeroDivisionError
}
EXPECTED = {
    "huge": ("size", "too_large"),
    "hello": ("gopher_quality", "gopher_below_avg_threshold"),
    "spam": ("gopher_repetition", "dup_line_frac"),
    "lorem": ("c4_quality", "lorem_ipsum"),
    "blank": ("gopher_quality", "filter-error:gopher_quality"),
}


def make_input(catalog, docs: dict[str, str], name=("raw", "web"), source: str = "web") -> int:
    table = ensure_table(catalog, name, DOCUMENT_SCHEMA)
    records = [
        {"doc_id": k, "source": source, "text": v, "path": f"{k}.txt", "lang": "en", "n_bytes": len(v.encode())}
        for k, v in docs.items()
    ]
    table.append(pa.Table.from_pylist(records, schema=arrow_schema(DOCUMENT_SCHEMA)))
    return catalog.load_table(name).current_snapshot().snapshot_id


@pytest.fixture
def config_file(tmp_path: Path) -> str:
    path = tmp_path / "web.toml"
    path.write_text(CONFIG)
    return str(path)


def main_ids(catalog, name=("filtered", "web")) -> list[str]:
    table = catalog.load_table(name)
    return sorted(table.scan().to_arrow().column("doc_id").to_pylist())


def test_filter_publishes_kept_documents_and_quarantines_the_rest(spark, catalog, config_file):
    snapshot_id = make_input(catalog, GOOD | BAD)
    opts = FilterOptions("raw.web", "filtered.web", config_file, run_id="f-1", tag="v1")

    result = filter_documents(spark, catalog, opts)

    output = catalog.load_table(("filtered", "web"))
    kept = output.scan().to_arrow().to_pylist()
    assert {d["doc_id"]: d["text"] for d in kept} == GOOD  # stored as they came: filters never rewrite
    assert head(output) == result.audited_snapshot_id == output.metadata.refs["v1"].snapshot_id
    assert "audit-f-1" not in output.metadata.refs  # the branch served its purpose

    refused = catalog.load_table(("filtered", "quarantine")).scan().to_arrow().to_pylist()
    assert {r["doc_id"]: (r["filter"], r["reason"]) for r in refused} == EXPECTED
    by_id = {r["doc_id"]: r for r in refused}
    assert all(r["stage"] == "filter" and r["run_id"] == "f-1" and r["source"] == "web" for r in refused)
    assert json.loads(by_id["huge"]["metrics"])["n_bytes"] == len(BAD["huge"])
    assert json.loads(by_id["hello"]["metrics"])["words"] == 1
    assert by_id["blank"]["detail"].startswith("ZeroDivisionError") and by_id["blank"]["metrics"] is None
    assert by_id["spam"]["record"] == BAD["spam"].encode()

    # Counts add up exactly, per filter and reason, in the summary of the published snapshot.
    stats = snapshot_stats(output.current_snapshot())
    assert stats["documents-in"] == len(GOOD) + len(BAD) == stats["kept"] + stats["quarantined"]
    assert stats["kept"] == len(GOOD) and stats["quarantined"] == len(BAD)
    per_filter = Counter(f for f, _ in EXPECTED.values())
    assert {k: v for k, v in stats.items() if k.count(".") == 1} == {f"dropped.{f}": n for f, n in per_filter.items()}
    assert stats["dropped.gopher_quality.filter-error:gopher_quality"] == 1

    summary = output.current_snapshot().summary
    assert summary["factory.job"] == "filter" and summary["factory.run-id"] == "f-1"
    assert json.loads(summary["factory.inputs"]) == [{"table": "raw.web", "snapshot_id": snapshot_id}]
    assert summary["factory.filter-config-sha256"] == load_config(config_file).sha256
    assert json.loads(summary["factory.params"])["config"]["sha256"] == load_config(config_file).sha256
    report_path = Path(summary["factory.validation"].removeprefix("file://"))
    report = json.loads(report_path.read_text())
    assert report["success"] and set(report["suites"]) == {"documents", "quarantine", "accounting"}
    pages = [report_path.parent / f"{suite}.html" for suite in report["suites"]]
    assert all(page.read_text().startswith("<!DOCTYPE html>") for page in pages)

    # The same run id again is a no-op.
    again = filter_documents(spark, catalog, opts)
    assert again.already_committed and again.audited_snapshot_id == result.audited_snapshot_id
    assert len(catalog.load_table(("filtered", "web")).snapshots()) == len(output.snapshots())


def test_a_failing_expectation_leaves_main_unchanged(spark, catalog, tmp_path):
    make_input(catalog, GOOD)
    published = ensure_table(catalog, ("filtered", "web"), DOCUMENT_SCHEMA)
    published.append(pa.Table.from_pylist([], schema=arrow_schema(DOCUMENT_SCHEMA)))
    before = head(catalog.load_table(("filtered", "web")))
    wrong_sources = tmp_path / "code-only.toml"
    wrong_sources.write_text('filters = ["size"]\nsources = ["code"]\n')  # the documents are `web`

    with pytest.raises(ValidationFailedError, match=r"expect_column_values_to_be_in_set\(source\)") as caught:
        filter_documents(spark, catalog, FilterOptions("raw.web", "filtered.web", str(wrong_sources), run_id="f-2"))

    output = catalog.load_table(("filtered", "web"))
    assert head(output) == before  # main untouched
    audited = output.snapshot_by_name("audit-f-2")  # the audited snapshot stays on its branch…
    assert sorted(output.scan(snapshot_id=audited.snapshot_id).to_arrow().column("doc_id").to_pylist()) == sorted(GOOD)
    report = Path(audited.summary["factory.validation"].removeprefix("file://"))  # …and its report
    assert not json.loads(report.read_text())["success"]
    assert str(report.parent) in str(caught.value).replace("file://", "")


def test_a_failed_run_retried_with_a_corrected_config_is_refused_and_publishes_nothing(spark, catalog, tmp_path):
    make_input(catalog, GOOD)
    config = tmp_path / "web.toml"
    failing, corrected = 'filters = ["size"]\nsources = ["code"]\n', 'filters = ["size"]\nsources = ["web"]\n'
    config.write_text(failing)  # the documents are `web`: validation fails
    opts = FilterOptions("raw.web", "filtered.web", str(config), run_id="f-4")
    with pytest.raises(ValidationFailedError):
        filter_documents(spark, catalog, opts)
    before = head(catalog.load_table(("filtered", "web")))
    failed_sha = load_config(str(config)).sha256

    config.write_text(corrected)
    fixed_sha = load_config(str(config)).sha256
    with pytest.raises(RunConflictError) as refused:
        filter_documents(spark, catalog, opts)
    message = str(refused.value)
    assert f"params.config.sha256: committed with {failed_sha!r}, now {fixed_sha!r}" in message
    assert "audit-f-4" in message and "new --run-id" in message
    assert head(catalog.load_table(("filtered", "web"))) == before  # nothing published

    # The same run with its own (failing) config is checked again, and fails again.
    config.write_text(failing)
    with pytest.raises(ValidationFailedError):
        filter_documents(spark, catalog, opts)
    assert head(catalog.load_table(("filtered", "web"))) == before

    config.write_text(corrected)
    published = filter_documents(spark, catalog, FilterOptions("raw.web", "filtered.web", str(config), run_id="f-5"))
    assert main_ids(catalog) == sorted(GOOD)
    summary = catalog.load_table(("filtered", "web")).current_snapshot().summary
    assert summary["factory.run-id"] == "f-5" and summary["factory.filter-config-sha256"] == fixed_sha
    assert published.audited_snapshot_id == head(catalog.load_table(("filtered", "web")))


def test_a_concurrent_change_to_main_during_audit_makes_publish_refuse(spark, catalog, config_file):
    make_input(catalog, GOOD)
    racer = pa.Table.from_pylist(
        [{"doc_id": "racer", "source": "web", "text": "x", "path": None, "lang": None, "n_bytes": 1}],
        schema=arrow_schema(DOCUMENT_SCHEMA),
    )

    def another_writer_commits_to_main():
        catalog.load_table(("filtered", "web")).append(racer)

    with pytest.raises(PublishRefusedError, match="main was left unchanged"):
        filter_documents(
            spark,
            catalog,
            FilterOptions("raw.web", "filtered.web", config_file, run_id="f-3"),
            before_publish=another_writer_commits_to_main,
        )
    assert main_ids(catalog) == ["racer"]  # the other writer's commit, not ours
    assert "audit-f-3" in catalog.load_table(("filtered", "web")).metadata.refs


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.parametrize("crash", ["between-commits", "before-publish"])
def test_a_filter_killed_between_its_steps_finishes_on_retry(factory_home, catalog, config_file, crash):
    make_input(catalog, GOOD | BAD)
    args = ("filter", "--input", "raw.web", "--output", "filtered.web", "--config", config_file, "--run-id", "f-k")
    killed = run_factory(*args, env={"FACTORY_FAIL_AT": crash})
    assert killed.returncode == -9, killed.stderr[-2000:]
    quarantined = find_run_snapshot(catalog.load_table(("filtered", "quarantine")), "f-k")
    assert quarantined is not None and find_run_snapshot(catalog.load_table(("filtered", "web")), "f-k") is None

    retried = run_factory(*args)

    assert retried.returncode == 0, retried.stderr[-2000:]
    assert "published to main" in retried.stdout and f"{len(GOOD)} documents kept" in retried.stdout
    assert main_ids(catalog) == sorted(GOOD)
    output, quarantine = catalog.load_table(("filtered", "web")), catalog.load_table(("filtered", "quarantine"))
    assert "audit-f-k" not in output.metadata.refs
    assert [s.snapshot_id for s in quarantine.snapshots()] == [quarantined.snapshot_id]
    assert sorted(quarantine.scan().to_arrow().column("doc_id").to_pylist()) == sorted(BAD)
    assert snapshot_stats(output.current_snapshot()) == snapshot_stats(quarantined)


@pytest.mark.parametrize(
    ("output", "quarantine"),
    [("raw.web", None), ("filtered.web", "raw.web"), ("filtered.web", "filtered.web")],
)
def test_the_input_output_and_quarantine_must_be_three_tables(catalog, config_file, output, quarantine):
    """Filtering a table into itself would append its kept documents to it; refused before Spark
    is needed, and nothing is written."""
    snapshot_id = make_input(catalog, GOOD)
    opts = FilterOptions("raw.web", output, config_file, quarantine=quarantine)
    with pytest.raises(InputError, match="three different tables"):
        filter_documents(None, catalog, opts)
    assert catalog.load_table(("raw", "web")).current_snapshot().snapshot_id == snapshot_id
    assert not catalog.table_exists(("filtered", "web"))


def test_an_output_with_columns_the_input_lacks_reads_them_null_or_is_refused_when_required(
    spark, catalog, config_file
):
    """An output a dedup's output made has cluster_id: a filter of raw documents into it failed in
    every Spark task with KeyError 'Field "cluster_id" does not exist'."""
    make_input(catalog, GOOD)
    extra = NestedField(100, "cluster_id", StringType(), required=False)
    ensure_table(catalog, ("filtered", "web"), Schema(*DOCUMENT_SCHEMA.fields, extra))
    filter_documents(spark, catalog, FilterOptions("raw.web", "filtered.web", config_file, run_id="f-extra"))
    rows = catalog.load_table(("filtered", "web")).scan().to_arrow().to_pylist()
    assert sorted(r["doc_id"] for r in rows) == sorted(GOOD) and {r["cluster_id"] for r in rows} == {None}

    required = NestedField(101, "score", StringType(), required=True)
    ensure_table(catalog, ("filtered", "strict"), Schema(*DOCUMENT_SCHEMA.fields, required))
    opts = FilterOptions("raw.web", "filtered.strict", config_file, run_id="f-strict")
    with pytest.raises(InputError, match=r"filtered.strict exists with required column\(s\) score"):
        filter_documents(spark, catalog, opts)
    assert catalog.load_table(("filtered", "strict")).current_snapshot() is None


def test_a_tag_the_jobs_reserve_is_refused_before_any_work(factory_home, catalog, config_file):
    """`--tag main` published, then failed ("'main' is a branch"), and so did every retry."""
    make_input(catalog, GOOD)
    for tag in ("main", "audit-x"):
        proc = run_factory("filter", "--input", "raw.web", "--output", "filtered.web", "--config", config_file,
                           "--tag", tag, timeout=120)  # fmt: skip
        assert proc.returncode == 2 and "is reserved" in proc.stderr and "Traceback" not in proc.stderr
    assert not catalog.table_exists(("filtered", "web"))


def test_a_tag_holding_the_runs_audit_branch_name_is_refused_before_the_spark_pass(catalog, config_file):
    """A tag `audit-<run-id>` (made before tags were checked, or by another tool) failed the run only
    after its Spark pass, staging files each time; now before Spark is needed, saying what to do."""
    snapshot_id = make_input(catalog, GOOD)
    output = ensure_table(catalog, ("filtered", "web"), DOCUMENT_SCHEMA)
    output.append(pa.Table.from_pylist([], schema=arrow_schema(DOCUMENT_SCHEMA)))
    output = catalog.load_table(("filtered", "web"))
    output.manage_snapshots().create_tag(output.current_snapshot().snapshot_id, "audit-f-t").commit()
    opts = FilterOptions("raw.web", "filtered.web", config_file, run_id="f-t")
    advice = "factory tag filtered.web audit-f-t --delete"
    with pytest.raises(PublishRefusedError, match=rf"has a tag 'audit-f-t'.*another --run-id.*{advice}"):
        filter_documents(None, catalog, opts)
    assert catalog.load_table(("raw", "web")).current_snapshot().snapshot_id == snapshot_id
    assert not Path(output.location().removeprefix("file://"), "data", "runs").exists()
    # The advice works: the tag goes, the branch's name is free.
    from factory_cli.main import main

    assert main(advice.split()[1:]) == 0
    assert "audit-f-t" not in catalog.load_table(("filtered", "web")).metadata.refs


def test_an_output_refused_for_its_columns_leaves_no_table_made(catalog, config_file):
    make_input(catalog, GOOD)
    ensure_table(catalog, ("raw", "other"), DOCUMENT_SCHEMA.select("doc_id"))  # a table with other columns
    opts = FilterOptions("raw.web", "filtered.web", config_file, quarantine="raw.other")
    with pytest.raises(InputError, match="exists with other columns"):
        filter_documents(None, catalog, opts)
    assert not catalog.table_exists(("filtered", "web"))


def test_a_bad_config_fails_before_spark_starts(factory_home, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('filters = ["size"]\n[size]\nmin_bytes = -3\n')
    proc = run_factory("filter", "--input", "raw.web", "--output", "filtered.web", "--config", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr and "min_bytes must be zero or more" in proc.stderr


def _layout(catalog, name: tuple[str, ...], drop: tuple[str, ...] = ()) -> list[list[dict]]:
    table = catalog.load_table(name)
    paths = sorted(t.file.file_path for t in table.scan().plan_files())
    files = [pq.read_table(p.removeprefix("file://")).to_pylist() for p in paths]
    return [[{k: v for k, v in row.items() if k not in drop} for row in rows] for rows in files]


@pytest.mark.slow
def test_spark_submit_gives_the_same_output_on_one_core(spark, catalog, config_file):
    make_input(catalog, GOOD | BAD)
    filter_documents(spark, catalog, FilterOptions("raw.web", "local2.web", config_file))
    venv_bin = Path(sys.executable).parent
    proc = subprocess.run(
        [str(venv_bin / "spark-submit"), "--master", "local[1]", *QUICK_JIT_SUBMIT, "pipelines/filter.py", "--input", "raw.web",
         "--output", "local1.web", "--config", config_file],
        cwd=REPO, env={**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "published to main" in proc.stdout and "dropped by gopher_quality: 2" in proc.stdout
    assert _layout(catalog, ("local1", "web")) == _layout(catalog, ("local2", "web"))
    q1 = _layout(catalog, ("local1", "quarantine"), drop=("run_id",))
    assert q1 == _layout(catalog, ("local2", "quarantine"), drop=("run_id",))


def test_the_filter_task_module_imports_no_pyiceberg():
    # Each Spark Python worker of the filter job imports quality.filter_task: pyiceberg (and
    # the driver's code) would add seconds to every worker's start.
    code = "import sys, quality.filter_task; print(sorted(m for m in sys.modules if m.split('.')[0] in {'pyiceberg', 'pyspark', 'pipelines'}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
