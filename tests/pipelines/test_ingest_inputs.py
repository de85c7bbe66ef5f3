"""Finding and reading input files: plain functions over real files."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import lzma
import os
import re
import tracemalloc
import types

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import zstandard

from lakehouse.errors import InputError
from pipelines import ingest_inputs
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
    (tmp_path / "x.jsonl.xz").write_bytes(lzma.compress(lines[:16]) + lzma.compress(lines[16:]))  # two streams
    (tmp_path / "b.JSONL.BZ2").write_bytes(bz2.compress(lines))
    (tmp_path / "named-plain.jsonl").write_bytes(lzma.compress(lines))  # its first bytes say xz
    cfg = RecordConfig(source="web")
    names = ["p.jsonl", "g.jsonl.gz", "z.jsonl.zst", "x.jsonl.xz", "b.JSONL.BZ2", "named-plain.jsonl"]
    for name in names:
        files = discover([str(tmp_path / name)], "jsonl")
        assert [(r["text"], r["reason"]) for r in read_records(encode_group(files), "jsonl", cfg)] == [
            ("one", None),
            ("two", None),
        ], name
    in_folder = read_records(encode_group(discover([str(tmp_path)], "jsonl")), "jsonl", cfg)
    assert sorted(r["text"] for r in in_folder) == sorted(["one", "two"] * len(names))


def test_a_compression_ingest_cannot_read_is_refused_not_read_as_text(tmp_path):
    (tmp_path / "a.jsonl.br").write_bytes(b"\x1b\x0f\x00")
    with pytest.raises(InputError, match=r"a\.jsonl\.br is brotli-compressed, which ingest does not read.*--exclude"):
        discover([str(tmp_path / "a.jsonl.br")], "jsonl", include=["*.br"])
    (tmp_path / "zipped.jsonl").write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    files = discover([str(tmp_path / "zipped.jsonl")], "jsonl")
    [row] = read_records(encode_group(files), "jsonl", RecordConfig(source="web"))
    assert row["reason"] == "unreadable" and "zipped.jsonl is zip-compressed" in row["detail"]


def test_a_corrupt_archive_is_one_unreadable_record_after_its_good_lines(tmp_path):
    good = gzip.compress(b'{"text": "one"}\n' * 2000)
    wrong_crc = bytes(b ^ 0xFF for b in good[-8:-4])  # the data decodes whole, then fails its check
    (tmp_path / "bad.jsonl.gz").write_bytes(good[:-8] + wrong_crc + good[-4:])
    files = discover([str(tmp_path / "bad.jsonl.gz")], "jsonl")
    rows = list(read_records(encode_group(files), "jsonl", RecordConfig(source="web")))
    assert rows[-1]["reason"] == "unreadable"
    assert all(r["reason"] is None for r in rows[:-1])


def test_a_cut_short_archive_keeps_its_good_lines_and_records_where_it_stopped(tmp_path):
    lines = [b'{"text": "line %d %s"}\n' % (i, os.urandom(24).hex().encode()) for i in range(4000)]
    whole = gzip.compress(b"".join(lines))
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    rows = list(
        read_records(encode_group(discover([str(tmp_path / "cut.jsonl.gz")], "jsonl")), "jsonl", RecordConfig("web"))
    )
    *good, cut = rows
    assert len(good) > 1000 and [json.dumps({"text": r["text"]}).encode() + b"\n" for r in good] == lines[: len(good)]
    assert cut["reason"] == "truncated-file" and cut["path"] == f"cut.jsonl.gz:{len(good) + 1}"
    assert "gzip data ends without its end marker after" in cut["detail"]
    assert f"inside line {len(good) + 1}" in cut["detail"] and lines[len(good)].startswith(cut["record"])


def test_a_line_over_the_bound_is_too_large_and_never_held_whole(tmp_path):
    huge = 32 << 20
    with (tmp_path / "huge.jsonl").open("wb") as out:
        out.write(b'{"text": "before"}\n{"text": "')
        for _ in range(huge >> 20):
            out.write(b"w" * (1 << 20))
        out.write(b'"}\n{"text": "after"}\n')
    files = encode_group(discover([str(tmp_path / "huge.jsonl")], "jsonl"))
    tracemalloc.start()
    try:
        rows = list(read_records(files, "jsonl", RecordConfig(source="web", max_doc_bytes=1000)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(r["text"], r["reason"]) for r in rows] == [("before", None), (None, "too-large"), ("after", None)]
    assert peak < huge // 4, f"{peak} bytes held reading a {huge}-byte line"
    assert rows[1]["detail"].startswith(f"line of {huge + 12} bytes > 6000 (6 x --max-doc-bytes 1000")


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


def _relpaths(paths: list, fmt: str = "jsonl", **kw) -> list[str]:
    return [f.relpath for f in discover([str(p) for p in paths], fmt, **kw)]


def test_a_name_that_is_not_utf8_is_refused_naming_it_unless_excluded(tmp_path):
    folder = tmp_path / "n"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"text": "x"}\n')
    bad = os.path.join(os.fsencode(folder), b"lat\xe9.jsonl")
    with open(bad, "wb") as f:
        f.write(b'{"text": "x"}\n')
    with pytest.raises(InputError, match=r"folder .*n holds lat\\xe9\.jsonl.*not valid UTF-8; rename it.*--exclude"):
        discover([str(folder)], "jsonl")
    assert _relpaths([folder], exclude=["lat*"]) == ["n/a.jsonl"]
    with pytest.raises(InputError, match=r"input .*lat\\xe9\.jsonl, a name that is not valid UTF-8; rename it"):
        discover([os.fsdecode(bad)], "jsonl")


def test_symlink_loops_and_second_links_list_each_real_file_once(tmp_path):
    loop = tmp_path / "L"
    loop.mkdir()
    (loop / "f.jsonl").write_text('{"text": "x"}\n')
    (loop / "loop").symlink_to("../L")
    assert _relpaths([loop]) == ["L/f.jsonl"]
    two = tmp_path / "L2"
    two.mkdir()
    (two / "f.jsonl").write_text('{"text": "x"}\n')
    (two / "l1").symlink_to(".")
    (two / "l2").symlink_to(".")
    assert _relpaths([two]) == ["L2/f.jsonl"]
    # A folder linked in from elsewhere is followed; a file linked twice is read once, first name kept.
    (tmp_path / "shard").mkdir()
    (tmp_path / "shard" / "s.jsonl").write_text('{"text": "s"}\n')
    (two / "shard").symlink_to(tmp_path / "shard")
    (two / "g.jsonl").symlink_to("f.jsonl")
    assert _relpaths([two]) == ["L2/f.jsonl", "L2/shard/s.jsonl"]
    (tmp_path / "self.jsonl").symlink_to("self.jsonl")
    with pytest.raises(InputError, match=r"self\.jsonl.*symlink loop"):
        discover([str(tmp_path / "self.jsonl")], "jsonl")
    (two / "self.jsonl").symlink_to("self.jsonl")  # inside a folder: skipped, with a warning
    assert _relpaths([two]) == ["L2/f.jsonl", "L2/shard/s.jsonl"]


def test_a_file_named_by_two_arguments_is_read_once_under_its_first_name(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "a.jsonl").write_text('{"text": "x"}\n')
    assert _relpaths([tmp_path / "base", tmp_path / "base" / "a.jsonl"]) == ["base/a.jsonl"]
    assert _relpaths([tmp_path / "base" / "a.jsonl", tmp_path / "base"]) == ["a.jsonl"]


def test_an_unreadable_folder_or_a_fifo_is_refused_naming_the_input(tmp_path, monkeypatch):
    (tmp_path / "d" / "locked").mkdir(parents=True)
    (tmp_path / "d" / "a.jsonl").write_text("")
    real_scandir = os.scandir

    def scandir(path):  # root ignores chmod: refuse the listing as a permission check would
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(InputError, match=r"cannot list folder .*d/locked of input .*d: Permission denied; grant"):
        discover([str(tmp_path / "d")], "jsonl")
    assert _relpaths([tmp_path / "d"], exclude=["locked/*"]) == ["d/a.jsonl"]
    os.mkfifo(tmp_path / "p.jsonl")
    with pytest.raises(InputError, match=r"input .*p\.jsonl is neither a file nor a folder"):
        discover([str(tmp_path / "p.jsonl")], "jsonl")
    os.mkfifo(tmp_path / "d" / "q.jsonl")  # inside a folder: skipped, never opened
    assert _relpaths([tmp_path / "d"], exclude=["locked/*"]) == ["d/a.jsonl"]


def test_a_store_listing_error_is_an_input_error_naming_the_input(monkeypatch):
    class Refusing:  # a store that refuses the listing, as S3 does keys without s3:ListBucket
        def get_file_info(self, what):
            raise OSError("When listing objects under key 'crawl' in bucket 'b': AWS Error ACCESS_DENIED")

    class FileSystem:
        @staticmethod
        def from_uri(uri):
            return Refusing(), "b/crawl"

    monkeypatch.setattr(ingest_inputs, "pafs", types.SimpleNamespace(**{**vars(pafs), "FileSystem": FileSystem}))
    with pytest.raises(InputError, match=r"cannot list input s3://b/crawl/: .*ACCESS_DENIED; check its address"):
        discover(["s3://b/crawl/"], "jsonl")


def test_an_empty_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.jsonl").write_text("")
    with pytest.raises(InputError, match="an input path is empty"):
        discover([""], "jsonl")


def test_files_matching_no_pattern_are_counted_and_default_patterns_ignore_case(tmp_path, caplog):
    folder = tmp_path / "m"
    folder.mkdir()
    for name in ["a.jsonl", "B.JSONL", "c.json", "e.jsonl.gz", "f.ndjson", "g.txt"]:
        (folder / name).write_text("")
    with caplog.at_level(logging.INFO, logger="factory.ingest"):
        assert _relpaths([folder]) == ["m/B.JSONL", "m/a.jsonl", "m/e.jsonl.gz", "m/f.ndjson"]
    assert re.search(r"m: 2 file\(s\) match no include pattern .*c\.json, g\.txt.*--include", caplog.text)
    assert _relpaths([folder], include=["*.jsonl"]) == ["m/a.jsonl"]  # a pattern given is matched as typed
