"""An ``s3://`` warehouse end to end, on moto's S3-API server: ingest → dedup → filter → mix pin →
loader batches → lineage → ``factory gc``, with the SQLite and the PostgreSQL catalog; the store's
keys never reach a snapshot, manifest, lineage record, log line or printed output."""

from __future__ import annotations

import json
import logging
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse.catalog import load_catalog
from lakehouse.commit import RUNS_DIR
from lakehouse.parquet import split_uri
from tests.conftest import REPO, run_factory
from tests.pipelines.chain import TABLES, run_chain
from tests.pipelines.test_other_engines import assert_daft_reads_as_pyiceberg
from tests.s3 import ACCESS_KEY, SECRET_KEY

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SECRETS = (ACCESS_KEY, SECRET_KEY)


def configure(monkeypatch: pytest.MonkeyPatch, name: str, properties: dict[str, str]) -> None:
    """The catalog ``name`` in pyiceberg's standard variables, as a deployment would set them
    (seen by this process and by the commands it starts)."""
    for key, value in properties.items():
        variable = key.upper().replace(".", "__").replace("-", "_")
        monkeypatch.setenv(f"PYICEBERG_CATALOG__{name.upper()}__{variable}", value)
    monkeypatch.setenv("FACTORY_CATALOG", name)


def assert_no_secret(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a store key reached {where}"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_an_s3_warehouse_end_to_end(kind, request, spark, moto, monkeypatch, tmp_path, caplog):
    from mixtures.manifest import Manifest
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from streaming_loader import StreamingLoader
    from streaming_loader.tokenizer_train import train_tokenizer
    from trainer.config import load_config
    from trainer.data import lineage_base

    caplog.set_level(logging.INFO)
    bucket = moto.bucket()
    name = f"s3{kind[:2]}{uuid.uuid4().hex[:6]}"
    uri = request.getfixturevalue("postgres").url if kind == "postgres" else f"sqlite:///{tmp_path / 'catalog.db'}"
    configure(
        monkeypatch, name, {"type": "sql", "uri": uri, "warehouse": f"s3://{bucket}/wh", **moto.file_io_properties()}
    )
    catalog = load_catalog(name)

    run_chain(spark, catalog, tmp_path / "inputs")

    # Every table, data file, staging folder and validation report lives in the bucket; leases
    # of committed runs are gone.
    for identifier in TABLES:
        table = catalog.load_table(identifier)
        assert table.location().startswith(f"s3://{bucket}/wh/")
        assert all(t.file.file_path.startswith(f"s3://{bucket}/") for t in table.scan().plan_files())
    rows = {".".join(i): catalog.load_table(i).scan().to_arrow() for i in TABLES}
    assert {k: v.num_rows for k, v in rows.items()} == {
        "raw.web": 9, "raw.quarantine": 1, "dedup.web": 7, "dedup.web_clusters": 9,
        "filtered.web": 6, "filtered.quarantine": 1,
    }  # fmt: skip
    assert rows["raw.quarantine"].column("reason").to_pylist() == ["too-large"]
    assert rows["filtered.quarantine"].column("doc_id").to_pylist() == [
        d for d in rows["dedup.web"].column("doc_id").to_pylist() if d not in rows["filtered.web"]["doc_id"].to_pylist()
    ]
    for identifier in TABLES:  # another engine reads them from the bucket: Daft, by field ids
        assert_daft_reads_as_pyiceberg(catalog.load_table(identifier))
    report = catalog.load_table(("filtered", "web")).current_snapshot().summary["factory.validation"]
    assert report.startswith(f"s3://{bucket}/wh/validation/")
    keys = moto.keys(bucket)
    assert report.removeprefix(f"s3://{bucket}/") in keys
    assert not [k for k in keys if k.endswith("/_lease")]
    assert not (tmp_path / "warehouse").exists()

    # Pinning, the tokenizer and the loader read the bucket: the loader with the properties its own
    # pyiceberg configuration gives the catalog the manifest names (the manifest holds no key).
    spec = spec_from_dict(
        {"seed": 5, "components": [{"name": "web", "table": "filtered.web", "ref": "v1", "weight": 1.0}]}
    )
    manifest_path = tmp_path / "manifest.json"
    pin(catalog, spec).save(manifest_path)
    manifest = Manifest.load(manifest_path)
    assert manifest.catalog["name"] == name
    assert all(f.path.startswith(f"s3://{bucket}/") for c in manifest.components for f in c.files)
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(train_tokenizer(catalog, ["filtered.web@v1"], 300).text)
    loader = StreamingLoader.from_manifest(
        manifest_path, tokenizer, seq_len=32, global_batch_size=4, backend="local", num_shards=2, log_interval_s=0
    )
    with loader:
        batches = [next(loader) for _ in range(3)]
    assert all(b["input_ids"].shape == (4, 32) for b in batches)
    decoded = loader.tokenizer.load().decode(batches[0]["input_ids"][0].tolist())
    words = set(" ".join(rows["filtered.web"].column("text").to_pylist()).split())
    assert set(decoded.split()[1:-1]) <= words  # whole words of the documents (the ends may be cut)

    # Lineage walks the bucket's tables back to ingest's raw input.
    cfg = load_config(
        REPO / "configs" / "demo-train.toml", [f"data.manifest={manifest_path}", f"data.tokenizer={tokenizer}"]
    )
    lineage = lineage_base(cfg, loader)
    assert "lineage_error" not in lineage
    (filter_run,) = lineage["components"][0]["runs"]
    (dedup_run,) = filter_run["inputs"][0]["runs"]
    (ingest_run,) = dedup_run["inputs"][0]["runs"]
    assert [r["job"] for r in (filter_run, dedup_run, ingest_run)] == ["filter", "dedup", "ingest"]
    assert ingest_run["inputs"][0]["uri"].endswith("web.jsonl")

    # `factory gc`, a fresh process configured by the variables alone, removes a dead run's staged
    # file from the bucket and keeps every committed one.
    documents = catalog.load_table(("raw", "web"))
    orphan = f"{documents.location()}/{RUNS_DIR}/dead-run/0123456789ab/part-00000-0-dead.parquet"
    fs, path = split_uri(orphan, documents.io.properties)
    with fs.open_output_stream(path) as out:
        pq.write_table(pa.table({"doc_id": ["x"]}), out)
    gc = run_factory("gc", "--grace-hours", "0")
    assert gc.returncode == 0, gc.stderr
    assert f"removed {orphan}" in gc.stdout and "raw.web: removed 1 file(s)" in gc.stdout
    assert fs.get_file_info(path).type.name == "NotFound"
    assert all(catalog.load_table(i).scan().to_arrow().num_rows == rows[".".join(i)].num_rows for i in TABLES)

    # A store that cannot be reached is a clear error, not a traceback.
    unreachable = run_factory("gc", env={f"PYICEBERG_CATALOG__{name.upper()}__S3__ENDPOINT": "http://127.0.0.1:1"})
    assert unreachable.returncode == 2 and "cannot reach the object store" in unreachable.stderr, unreachable.stderr

    # The keys reached nothing the factory wrote or said: snapshot summaries and table metadata (in
    # the bucket), validation reports, the manifest, the lineage record, logs, the command's output.
    client = moto.client()
    for key in moto.keys(bucket):
        if key.endswith((".json", ".avro", ".html")):
            assert_no_secret(key, client.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8", "replace"))
    assert_no_secret("the manifest", manifest_path.read_text())
    assert_no_secret("the lineage", json.dumps(lineage, default=str))
    assert_no_secret("the log", caplog.text)
    assert_no_secret("gc's output", gc.stdout + gc.stderr + unreachable.stdout + unreachable.stderr)
