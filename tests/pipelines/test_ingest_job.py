"""The ingest job on real Spark (local[2]) and a real SQLite Iceberg catalog."""

from __future__ import annotations

import dataclasses
import gzip
import json
import lzma
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from lakehouse.commit import snapshot_stats
from lakehouse.errors import InputError, RunConflictError
from pipelines.ingest import IngestOptions, ingest
from pipelines.ingest_records import RecordConfig, doc_id_for
from tests.conftest import run_factory


def options(paths, fmt: str, output: str = "raw.docs", **record_kwargs) -> IngestOptions:
    run_id = record_kwargs.pop("run_id", None)
    include = record_kwargs.pop("include", ())
    record_kwargs.setdefault("source", "web")
    return IngestOptions(
        inputs=[str(p) for p in paths],
        fmt=fmt,
        output=output,
        records=RecordConfig(**record_kwargs),
        include=include,
        run_id=run_id,
    )


def rows(catalog, name: str, snapshot_id: int | None = None) -> list[dict]:
    table = catalog.load_table(tuple(name.split(".")))
    if table.current_snapshot() is None:
        return []
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist(), key=lambda r: r["doc_id"])


def write_jsonl(path: Path, records: list[dict], compress=None) -> Path:
    data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    path.write_bytes(compress(data) if compress else data)
    return path


def test_jsonl_plain_gzip_zstd_and_xz(spark, catalog, tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": "a1", "text": "alpha"}, {"id": "a2", "text": "beta"}])
    b = write_jsonl(tmp_path / "b.jsonl.gz", [{"id": "b1", "text": "gamma"}], gzip.compress)
    c = write_jsonl(tmp_path / "c.jsonl.zst", [{"id": "c1", "text": "delta"}], zstandard.ZstdCompressor().compress)
    d = write_jsonl(tmp_path / "d.jsonl.xz", [{"id": "d1", "text": "epsilon"}], lzma.compress)

    # c by a URI with a query (a signed URL's): its files and bytes were recorded as 0 in factory.inputs.
    result = ingest(
        spark, catalog, options([a, b, f"{c.as_uri()}?version=1", d], "jsonl", id_field="id", run_id="jsonl-1")
    )

    docs = rows(catalog, "raw.docs")
    assert {d["text"] for d in docs} == {"alpha", "beta", "gamma", "delta", "epsilon"}
    assert {d["doc_id"] for d in docs} == {doc_id_for("web", f"id:{i}") for i in ["a1", "a2", "b1", "c1", "d1"]}
    assert all(d["source"] == "web" and d["n_bytes"] == len(d["text"]) for d in docs)
    snapshot = catalog.load_table(("raw", "docs")).current_snapshot()
    assert snapshot.snapshot_id == result.documents.snapshot_id
    summary = snapshot.summary
    assert summary["factory.job"] == "ingest" and summary["factory.run-id"] == "jsonl-1"
    inputs = json.loads(summary["factory.inputs"])
    assert [(i["files"], i["bytes"]) for i in inputs] == [(1, p.stat().st_size) for p in (a, b, c, d)]
    assert json.loads(summary["factory.params"])["id_field"] == "id"
    assert snapshot_stats(snapshot) == {
        "files": 4,
        "bytes-in": sum(p.stat().st_size for p in (a, b, c, d)),
        "documents-in": 5,
        "kept": 5,
        "quarantined": 0,
    }


def test_parquet_input(spark, catalog, tmp_path):
    table = pa.table({"content": ["x = 1", None, "fn main() {}"], "lang": ["python", "python", "rust"], "n": [1, 2, 3]})
    pq.write_table(table, tmp_path / "part.parquet")
    ingest(spark, catalog, options([tmp_path / "part.parquet"], "parquet", text_field="content", lang_field="lang"))
    docs = rows(catalog, "raw.docs")
    assert sorted((d["text"], d["lang"], d["path"]) for d in docs) == [
        ("fn main() {}", "rust", "part.parquet#2"),
        ("x = 1", "python", "part.parquet#0"),
    ]
    (refused,) = rows(catalog, "raw.quarantine")
    assert (refused["reason"], refused["path"], refused["stage"]) == ("missing-text", "part.parquet#1", "ingest")


def test_source_tree_with_every_refusal(spark, catalog, tmp_path):
    repo = tmp_path / "repo"
    files = {
        "src/main.py": b"print('hi')\n",
        "src/lib.rs": b"pub fn f() {}\n",
        "src/logo.png": b"\x89PNG\r\n\x1a\n\x00\x00",
        "src/data.bin2": b"ab\x00cd",
        "node_modules/pkg/index.js": b"module.exports = 1;\n",
        "static/app.min.js": b"var a=1",
        "src/latin1.py": b"# caf\xe9\n",
        "src/empty.py": b"",
        "src/huge.py": b"x = 1\n" * 100,
    }
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)

    result = ingest(spark, catalog, options([repo], "files", source="code", max_doc_bytes=500))

    docs = rows(catalog, "raw.docs")
    assert sorted((d["path"], d["lang"]) for d in docs) == [("repo/src/lib.rs", "rust"), ("repo/src/main.py", "python")]
    refused = {r["path"]: r for r in rows(catalog, "raw.quarantine")}
    assert {p: r["reason"] for p, r in refused.items()} == {
        "repo/src/logo.png": "binary",
        "repo/src/data.bin2": "binary",
        "repo/node_modules/pkg/index.js": "vendored",
        "repo/static/app.min.js": "minified",
        "repo/src/latin1.py": "invalid-utf8",
        "repo/src/empty.py": "empty",
        "repo/src/huge.py": "too-large",
    }
    assert refused["repo/src/latin1.py"]["record"] == b"# caf\xe9\n"
    assert {r["run_id"] for r in refused.values()} == {result.run_id}
    stats = result.stats
    assert stats["documents-in"] == len(files) == stats["kept"] + stats["quarantined"]
    assert stats["quarantined.binary"] == 2 and stats["quarantined.too-large"] == 1


def test_bad_jsonl_records_are_quarantined_and_counted_once(spark, catalog, tmp_path):
    lines = [
        b'{"id": 1, "text": "good one"}',
        b'{"id": 2, "text": "trunc',
        b'{"id": 3, "text": "caf\xe9"}',
        b'{"id": 4, "text": "nul\\u0000byte"}',
        b'{"id": 5, "text": ""}',
        b'{"id": 6, "text": "' + b"z" * 300 + b'"}',
        b'{"id": 7, "body": "no text"}',
        b'"just a string"',
        b'{"id": 1, "text": "same id as the first"}',
        b'{"id": 9, "text": "good two"}',
        b'{"id": 10, "text": "' + b"z" * 2000 + b'"}',  # over 6 x --max-doc-bytes: refused unread
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    whole = gzip.compress(b"".join(b'{"id": "c%d", "text": "cut %d"}\n' % (i, i) for i in range(5000)))
    cut = tmp_path / "cut.jsonl.gz"  # a download cut short: its good lines are kept, the cut quarantined
    cut.write_bytes(whole[: len(whole) // 2])

    result = ingest(spark, catalog, options([path, cut], "jsonl", id_field="id", max_doc_bytes=200))

    docs = rows(catalog, "raw.docs")
    assert [d["text"] for d in sorted(docs, key=lambda d: d["path"]) if d["path"].startswith("bad")] == [
        "good one",
        "good two",
    ]
    n_cut = len(docs) - 2
    assert n_cut > 1000 and {d["text"] for d in docs if d["path"].startswith("cut")} == {
        f"cut {i}" for i in range(n_cut)
    }
    refused = {r["path"]: r["reason"] for r in rows(catalog, "raw.quarantine")}
    assert refused.pop(f"cut.jsonl.gz:{n_cut + 1}") == "truncated-file"
    assert refused == {
        "bad.jsonl:2": "malformed-json",
        "bad.jsonl:3": "invalid-utf8",
        "bad.jsonl:4": "nul-byte",
        "bad.jsonl:5": "empty",
        "bad.jsonl:6": "too-large",
        "bad.jsonl:7": "missing-text",
        "bad.jsonl:8": "malformed-json",
        "bad.jsonl:9": "duplicate-id",
        "bad.jsonl:11": "too-large",
    }
    assert result.stats["documents-in"] == len(lines) + n_cut + 1
    assert result.stats["kept"] + result.stats["quarantined"] == len(lines) + n_cut + 1
    assert result.stats["quarantined.malformed-json"] == 2 and result.stats["quarantined.truncated-file"] == 1
    # The cut file was read (its good lines are in): the ledger lists it, unlike an unreadable one.
    listed = catalog.load_table(("raw", "ingested_files")).scan().to_arrow().column("relpath").to_pylist()
    assert sorted(listed) == ["bad.jsonl", "cut.jsonl.gz"]


def test_ids_are_stable_across_reingest(spark, catalog, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_jsonl(corpus / "a.jsonl", [{"text": f"doc {i}"} for i in range(20)])
    ingest(spark, catalog, options([corpus], "jsonl", output="raw.first"))
    ingest(spark, catalog, options([corpus], "jsonl", output="raw.second"))
    first, second = rows(catalog, "raw.first"), rows(catalog, "raw.second")
    assert len(first) == 20
    assert [(d["doc_id"], d["text"]) for d in first] == [(d["doc_id"], d["text"]) for d in second]

    # Ingesting the same records into the same table again adds nothing: ids stay unique.
    again = ingest(spark, catalog, options([corpus], "jsonl", output="raw.first"))
    assert again.stats["kept"] == 0 and again.stats["quarantined.duplicate-id"] == 20
    assert rows(catalog, "raw.first") == first


def test_same_run_id_twice_commits_once(spark, catalog, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"text": "one"}, {"text": "two"}])
    first = ingest(spark, catalog, options([path], "jsonl", run_id="nightly-2026-11-29"))
    second = ingest(spark, catalog, options([path], "jsonl", run_id="nightly-2026-11-29"))
    assert second.already_committed
    assert second.documents.snapshot_id == first.documents.snapshot_id
    assert second.stats == first.stats
    for name in ("raw.docs", "raw.quarantine"):
        assert len(catalog.load_table(tuple(name.split("."))).snapshots()) == 1
    assert len(rows(catalog, "raw.docs")) == 2


def test_a_retry_after_a_crash_between_the_two_commits_commits_only_the_quarantine(spark, catalog, tmp_path):
    earlier = write_jsonl(tmp_path / "earlier.jsonl", [{"id": "x", "text": "already here"}])
    ingest(spark, catalog, options([earlier], "jsonl", id_field="id", run_id="earlier"))
    path = write_jsonl(tmp_path / "a.jsonl", [{"id": "x", "text": "again"}, {"id": "y", "text": "new"}])
    with path.open("a") as f:
        f.write("{broken\n")
    opts = options([path], "jsonl", id_field="id", run_id="nightly")
    first = ingest(spark, catalog, opts)
    refused = rows(catalog, "raw.quarantine")
    assert {r["reason"] for r in refused} == {"duplicate-id", "malformed-json"}
    # As if the process died after committing the documents: the quarantine commit never happened.
    quarantine = catalog.load_table(("raw", "quarantine"))
    parent = quarantine.current_snapshot().parent_snapshot_id
    quarantine.manage_snapshots().set_current_snapshot(snapshot_id=parent).commit()

    retried = ingest(spark, catalog, opts)

    assert retried.stats == first.stats and retried.stats["kept"] == 1
    assert retried.documents.already_committed and retried.documents.snapshot_id == first.documents.snapshot_id
    assert not retried.quarantine.already_committed
    assert rows(catalog, "raw.quarantine") == refused  # what the run would have refused, no more
    assert len(catalog.load_table(("raw", "docs")).snapshots()) == 2
    assert sorted(r["doc_id"] for r in rows(catalog, "raw.docs")) == sorted(
        doc_id_for("web", f"id:{i}") for i in ("x", "y")
    )


def test_the_same_run_id_with_other_parameters_or_inputs_is_refused(spark, catalog, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"text": "one"}, {"text": "two"}])
    first = ingest(spark, catalog, options([path], "jsonl", run_id="nightly"))
    with pytest.raises(RunConflictError) as refused:
        ingest(spark, catalog, options([path], "jsonl", run_id="nightly", max_doc_bytes=100))
    message = str(refused.value)
    assert "params.max_doc_bytes: committed with 10485760, now 100" in message
    assert "raw.docs" in message and "new --run-id" in message
    other = write_jsonl(tmp_path / "b.jsonl", [{"text": "three"}])
    with pytest.raises(RunConflictError, match=r"inputs\[0\]\.uri: committed with .*a\.jsonl.*, now .*b\.jsonl"):
        ingest(spark, catalog, options([other], "jsonl", run_id="nightly"))
    assert [s.snapshot_id for s in catalog.load_table(("raw", "docs")).snapshots()] == [first.documents.snapshot_id]
    same = dataclasses.replace(options([path], "jsonl"), quarantine="raw.docs")
    with pytest.raises(InputError, match="--output and the quarantine table must be two different tables"):
        ingest(spark, catalog, same)
    assert [s.snapshot_id for s in catalog.load_table(("raw", "docs")).snapshots()] == [first.documents.snapshot_id]


def test_an_input_of_blank_lines_gives_an_empty_snapshot(spark, catalog, tmp_path):
    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"\n\n")
    result = ingest(spark, catalog, options([path], "jsonl"))
    assert result.stats["documents-in"] == 0
    assert catalog.load_table(("raw", "docs")).current_snapshot().snapshot_id == result.documents.snapshot_id
    assert rows(catalog, "raw.docs") == []


def _layout(catalog, snapshot_id: int) -> list[list[dict]]:
    """Each data file's rows in file order: the physical output, not only its content."""
    table = catalog.load_table(("raw", "docs"))
    paths = sorted(t.file.file_path for t in table.scan(snapshot_id=snapshot_id).plan_files())
    return [pq.read_table(p.removeprefix("file://")).to_pylist() for p in paths]


@pytest.mark.slow
def test_output_does_not_depend_on_parallelism(spark, catalog, factory_home, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in range(6):
        write_jsonl(corpus / f"{f}.jsonl", [{"text": f"file {f} doc {i}"} for i in range(50)] + [{"text": ""}])
    local2 = ingest(spark, catalog, options([corpus], "jsonl", output="raw.docs"))
    proc = run_factory(
        "ingest", "--source", "web", "--format", "jsonl", str(corpus), "--output", "raw.other", "-q",
        env={"FACTORY_SPARK_MASTER": "local[1]"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    other = catalog.load_table(("raw", "other")).current_snapshot().snapshot_id
    table = catalog.load_table(("raw", "other"))
    paths = sorted(t.file.file_path for t in table.scan(snapshot_id=other).plan_files())
    layout_other = [pq.read_table(p.removeprefix("file://")).to_pylist() for p in paths]
    assert _layout(catalog, local2.documents.snapshot_id) == layout_other


def test_the_documents_table_is_cut_into_row_groups_of_its_property(spark, catalog, tmp_path):
    """Spark hands a task's rows over in Arrow batches of thousands of documents; each batch was
    one row group (tens of MB over source files), all of it decoded to read one document."""
    records = [{"id": str(i), "text": f"{i} " + "word " * 2_000} for i in range(600)]  # ~6 MB
    path = write_jsonl(tmp_path / "big.jsonl", records)
    ingest(spark, catalog, options([path], "jsonl", id_field="id"))

    table = catalog.load_table(("raw", "docs"))
    groups = []
    for task in table.scan().plan_files():
        meta = pq.read_metadata(task.file.file_path.removeprefix("file://"))
        groups += [meta.row_group(g) for g in range(meta.num_row_groups)]
    assert sum(g.num_rows for g in groups) == 600 and len(groups) >= 6
    assert max(g.total_byte_size for g in groups) < 1.2 * (1 << 20)


def test_an_object_store_input_is_read_with_the_endpoint_and_keys_its_uri_gives(
    spark, catalog, moto, monkeypatch, tmp_path
):
    """The listing used the URI's keys (its userinfo) and query (the endpoint); each file's read
    re-opened it without them, so every file was one `unreadable` record. The ids and the ledger are those of the
    same files ingested from a local folder, and no key is recorded."""
    from tests.s3 import ACCESS_KEY, SECRET_KEY

    for variable in [v for v in os.environ if v.startswith("AWS_")]:
        monkeypatch.delenv(variable)  # only the URI can say where the store is and what its keys are
    local = tmp_path / "crawl"
    (local / "sub").mkdir(parents=True)
    write_jsonl(local / "a.jsonl", [{"text": "alpha"}, {"text": "beta"}])
    write_jsonl(local / "sub" / "b.jsonl.gz", [{"text": "gamma"}], gzip.compress)
    bucket = moto.bucket()
    for path in (local / "a.jsonl", local / "sub" / "b.jsonl.gz"):
        key = path.relative_to(tmp_path).as_posix()
        moto.client().put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    given = f"s3://{ACCESS_KEY}:{SECRET_KEY}@{bucket}/crawl/?endpoint_override=127.0.0.1:{moto.port}&scheme=http"

    remote = ingest(spark, catalog, options([given], "jsonl", output="raw.remote"))
    ingest(spark, catalog, options([local], "jsonl", output="raw.local"))

    assert remote.stats["kept"] == 3 and remote.stats["quarantined"] == 0, rows(catalog, "raw.quarantine")
    assert [(d["doc_id"], d["path"]) for d in rows(catalog, "raw.remote")] == [
        (d["doc_id"], d["path"]) for d in rows(catalog, "raw.local")
    ]
    listed = catalog.load_table(("raw", "ingested_files")).scan().to_arrow().to_pylist()
    assert sorted((r["relpath"], r["uri"]) for r in listed if r["output"] == "raw.remote") == [
        ("crawl/a.jsonl", f"s3://{bucket}/crawl/a.jsonl"),
        ("crawl/sub/b.jsonl.gz", f"s3://{bucket}/crawl/sub/b.jsonl.gz"),
    ]
    summary = catalog.load_table(("raw", "remote")).current_snapshot().summary
    assert [i["files"] for i in json.loads(summary["factory.inputs"])] == [2]
    recorded = json.dumps(listed, default=str) + summary["factory.inputs"]
    assert SECRET_KEY not in recorded and ACCESS_KEY not in recorded
