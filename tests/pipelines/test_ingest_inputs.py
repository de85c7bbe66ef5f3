"""Finding and reading input files: plain functions over real files."""

from __future__ import annotations

import gzip

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from lakehouse.errors import InputError
from pipelines.ingest_inputs import InputFile, check_fields, discover, encode_group, plan_tasks, read_records
from pipelines.ingest_records import RecordConfig


def test_relative_paths_start_at_the_named_folder(tmp_path):
    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / "pkg" / "a.py").write_text("a")
    (tmp_path / "repo" / "b.c").write_text("b")
    (tmp_path / "repo" / ".git").mkdir()
    (tmp_path / "repo" / ".git" / "HEAD").write_text("ref")
    files = discover([str(tmp_path / "repo")], "files")
    assert [f.relpath for f in files] == ["repo/b.c", "repo/pkg/a.py"]
    assert files[0].uri == (tmp_path / "repo" / "b.c").as_uri()
    assert [f.relpath for f in discover([str(tmp_path / "repo")], "files", include=["*.py"])] == ["repo/pkg/a.py"]
    assert [f.relpath for f in discover([str(tmp_path / "repo")], "files", exclude=["pkg/*"])] == ["repo/b.c"]


def test_jsonl_folders_take_jsonl_files_only(tmp_path):
    for name in ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "notes.txt"]:
        (tmp_path / name).write_bytes(b"")
    assert [f.relpath for f in discover([str(tmp_path)], "jsonl")] == [
        f"{tmp_path.name}/a.jsonl",
        f"{tmp_path.name}/b.jsonl.gz",
        f"{tmp_path.name}/c.jsonl.zst",
    ]


def test_missing_inputs_and_colliding_paths_are_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        discover([str(tmp_path / "nope")], "files")
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    (tmp_path / "x" / "a.jsonl").write_text("")
    (tmp_path / "y" / "a.jsonl").write_text("")
    with pytest.raises(InputError, match="share the relative path"):
        discover([str(tmp_path / "x" / "a.jsonl"), str(tmp_path / "y" / "a.jsonl")], "jsonl")
    with pytest.raises(InputError, match="no parquet input files"):
        discover([str(tmp_path / "x")], "parquet")


def test_compressed_jsonl_reads_like_plain(tmp_path):
    lines = b'{"text": "one"}\n{"text": "two"}\n'
    (tmp_path / "p.jsonl").write_bytes(lines)
    (tmp_path / "g.jsonl.gz").write_bytes(gzip.compress(lines))
    (tmp_path / "z.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines))
    cfg = RecordConfig(source="web")
    for name in ["p.jsonl", "g.jsonl.gz", "z.jsonl.zst"]:
        files = discover([str(tmp_path / name)], "jsonl")
        assert [r["text"] for r in read_records(encode_group(files), "jsonl", cfg)] == ["one", "two"]


def test_a_corrupt_archive_is_one_unreadable_record_after_its_good_lines(tmp_path):
    good = gzip.compress(b'{"text": "one"}\n' * 2000)
    (tmp_path / "bad.jsonl.gz").write_bytes(good[: len(good) // 2] + b"garbage" * 10)
    files = discover([str(tmp_path / "bad.jsonl.gz")], "jsonl")
    rows = list(read_records(encode_group(files), "jsonl", RecordConfig(source="web")))
    assert rows[-1]["reason"] == "unreadable"
    assert all(r["reason"] is None for r in rows[:-1])


def test_parquet_rows_are_read(tmp_path):
    pq.write_table(pa.table({"content": ["a", "b"], "id": ["x", "y"]}), tmp_path / "d.parquet")
    files = discover([str(tmp_path / "d.parquet")], "parquet")
    rows = list(
        read_records(encode_group(files), "parquet", RecordConfig(source="web", text_field="content", id_field="id"))
    )
    assert [r["text"] for r in rows] == ["a", "b"]


def test_task_plan_balances_and_keeps_every_file_once():
    files = [InputFile(f"file:///f{i}", f"f{i:03d}", size=(i % 7 + 1) * 1000) for i in range(100)]
    groups = plan_tasks(files, parallelism=2)
    assert len(groups) == 8
    assert sorted(f.relpath for g in groups for f in g) == [f.relpath for f in files]
    loads = [sum(f.size for f in g) for g in groups]
    assert max(loads) - min(loads) <= 7000
    assert plan_tasks(files, parallelism=2) == groups
    assert len(plan_tasks(files[:3], parallelism=2)) == 3


def test_parquet_files_without_the_named_fields_or_with_other_types_are_refused(tmp_path):
    pq.write_table(pa.table({"text": ["a", "b"]}), tmp_path / "good.parquet")
    pq.write_table(pa.table({"body": ["a"], "url": ["u"]}), tmp_path / "no-text.parquet")
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "int-text.parquet")
    pq.write_table(pa.table({"text": ["a"], "id": [[1, 2]]}), tmp_path / "list-id.parquet")
    cfg = RecordConfig(source="web")

    def check(name: str, cfg: RecordConfig = cfg) -> None:
        check_fields(discover([str(tmp_path / name)], "parquet"), "parquet", cfg)

    check("good.parquet")
    with pytest.raises(InputError, match=r"no-text\.parquet.*no field 'text' \(--text-field\).*body, url"):
        check("no-text.parquet")
    with pytest.raises(InputError, match=r"int-text\.parquet.*'text' \(--text-field\) holds int64, not text"):
        check("int-text.parquet")
    with pytest.raises(InputError, match=r"list-id\.parquet.*'id' \(--id-field\) holds list<element: int64>"):
        check("list-id.parquet", RecordConfig(source="web", id_field="id"))
    with pytest.raises(InputError, match=r"good\.parquet.*no field 'url' \(--path-field\)"):
        check("good.parquet", RecordConfig(source="web", path_field="url"))
    # Every bad file of the input is named, not only the first.
    with pytest.raises(InputError, match=r"2 input file\(s\).*int-text\.parquet.*no-text\.parquet"):
        check_fields(discover([str(tmp_path)], "parquet"), "parquet", cfg)


def test_jsonl_files_whose_first_records_lack_the_named_field_are_refused(tmp_path):
    (tmp_path / "good.jsonl").write_text('{"body": "x"}\n{"text": "y"}\n')  # one record with it is enough
    (tmp_path / "typo.jsonl.gz").write_bytes(gzip.compress(b'{"content": "x", "url": "u"}\n' * 3))
    (tmp_path / "numbers.jsonl").write_text('{"text": 1}\n{"text": null}\n')
    (tmp_path / "blank.jsonl").write_text("\n\n{broken\n")  # nothing to judge: left to the records' checks
    cfg = RecordConfig(source="web")
    for name in ("good.jsonl", "blank.jsonl"):
        check_fields(discover([str(tmp_path / name)], "jsonl"), "jsonl", cfg)
    with pytest.raises(InputError, match=r"typo\.jsonl\.gz.*no field 'text' \(--text-field\).*content, url"):
        check_fields(discover([str(tmp_path / "typo.jsonl.gz")], "jsonl"), "jsonl", cfg)
    with pytest.raises(InputError, match=r"numbers\.jsonl.*'text' \(--text-field\) holds int, not text"):
        check_fields(discover([str(tmp_path / "numbers.jsonl")], "jsonl"), "jsonl", cfg)
    # A corrupt file is not judged here: the job quarantines it as `unreadable`, as before.
    (tmp_path / "corrupt.parquet").write_bytes(b"not parquet at all")
    check_fields(discover([str(tmp_path / "corrupt.parquet")], "parquet"), "parquet", cfg)
