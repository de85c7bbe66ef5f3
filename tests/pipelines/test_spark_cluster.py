"""ingest, dedup and filter on a real Spark standalone cluster (a Master and two Workers, each its
own JVM) through spark-submit: the same tables as the local[2] runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.dedup import DedupOptions, dedup
from pipelines.filter import FilterOptions, filter_documents
from pipelines.ingest import IngestOptions, ingest
from pipelines.ingest_records import RecordConfig
from pipelines.ship_code import code_archive, ship_code
from tests.conftest import REPO
from tests.documents import prose
from tests.pipelines.dedup_corpus import planted_corpus
from tests.pipelines.test_filter_job import BAD, CONFIG
from tests.spark_cluster import QUICK_JIT_SUBMIT, StandaloneCluster

DECOY = "raise ImportError('the Worker imported its own {name}, not the code the driver runs')\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Each Worker's PYTHONPATH leads to packages that refuse to import: a task that imports
    # anything but the code the driver shipped fails the job.
    decoys = tmp_path_factory.mktemp("worker-site")
    for name in ("lakehouse", "pipelines", "quality"):
        (decoys / name).mkdir()
        (decoys / name / "__init__.py").write_text(DECOY.format(name=name))
    server = StandaloneCluster(workers=2, cores=1, worker_env={"PYTHONPATH": str(decoys)})
    server.start()
    yield server
    server.stop()


def write_corpus(path: Path) -> Path:
    """JSONL with exact and near duplicates (dedup), and prose some filters drop."""
    records = [{"id": d["path"], "text": d["text"]} for d in planted_corpus(originals=25).docs]
    records += [{"id": f"prose-{i}", "text": prose(i)} for i in range(20)]
    records += [{"id": f"prose-copy-{i}", "text": prose(i)} for i in range(5)]
    records += [{"id": key, "text": text} for key, text in BAD.items()]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def spark_submit(cluster: StandaloneCluster, job: str, *args: str) -> subprocess.CompletedProcess:
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}", "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [str(venv_bin / "spark-submit"), "--master", cluster.url, "--conf", "spark.executor.memory=512m"]
    command += QUICK_JIT_SUBMIT
    proc = subprocess.run(
        [*command, f"pipelines/{job}.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def rows(catalog, name: str, *columns: str) -> list[tuple]:
    table = catalog.load_table(tuple(name.split(".")))
    return sorted(tuple(r[c] for c in columns) for r in table.scan().to_arrow().to_pylist())


@pytest.mark.slow
@pytest.mark.engine
def test_ingest_dedup_filter_on_a_standalone_cluster_match_local(cluster, spark, catalog, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    config = tmp_path / "web.toml"
    config.write_text(CONFIG)

    ingest(
        spark,
        catalog,
        IngestOptions([str(corpus)], "jsonl", "raw_local.web", RecordConfig(source="web", id_field="id")),
    )
    dedup(spark, catalog, DedupOptions(inputs=["raw_local.web"], output="dedup_local.web"))
    filter_documents(spark, catalog, FilterOptions("dedup_local.web", "filtered_local.web", str(config)))

    ingested = spark_submit(
        cluster, "ingest", "--source", "web", "--format", "jsonl", str(corpus), "--id-field", "id",
        "--output", "raw_cluster.web",
    )  # fmt: skip
    spark_submit(cluster, "dedup", "--input", "raw_cluster.web", "--output", "dedup_cluster.web")
    filtered = spark_submit(
        cluster, "filter", "--input", "dedup_cluster.web", "--output", "filtered_cluster.web", "--config", str(config)
    )
    assert "raw_cluster.web@" in ingested.stdout and "published to main" in filtered.stdout

    # Both Workers ran an executor for each of the three jobs.
    state = cluster.state()
    assert len(state["completedapps"]) == 3 and state["aliveworkers"] == 2
    assert [len({p.parent for p in cluster.executor_dirs(w)}) for w in (0, 1)] == [3, 3]

    document = ("doc_id", "source", "text", "path", "lang", "n_bytes")
    assert rows(catalog, "raw_cluster.web", *document) == rows(catalog, "raw_local.web", *document)
    decided = ("doc_id", "cluster_id", "kept", "duplicate_of", "match")
    clusters = rows(catalog, "dedup_cluster.web_clusters", *decided)
    assert clusters == rows(catalog, "dedup_local.web_clusters", *decided)
    assert sum(not kept for _, _, kept, _, _ in clusters) >= 25  # exact and near duplicates were removed
    kept = ("doc_id", "cluster_id")
    assert rows(catalog, "dedup_cluster.web", *kept) == rows(catalog, "dedup_local.web", *kept)
    assert rows(catalog, "filtered_cluster.web", "doc_id") == rows(catalog, "filtered_local.web", "doc_id")
    dropped = rows(catalog, "filtered_cluster.quarantine", "doc_id", "filter", "reason")
    assert dropped == rows(catalog, "filtered_local.quarantine", "doc_id", "filter", "reason")
    assert {f for _, f, _ in dropped} >= {"size", "gopher_repetition", "c4_quality"}


def test_a_local_session_ships_no_code(spark):
    assert ship_code(spark) is None


def test_the_code_archive_holds_the_task_packages_and_is_reproducible():
    import io
    import zipfile

    data = code_archive()
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert {"pipelines/dedup_stages.py", "quality/filter_task.py", "lakehouse/__init__.py"} <= set(names)
    assert "quality/configs/code.toml" in names and not any("__pycache__" in n for n in names)
    assert code_archive() == data
