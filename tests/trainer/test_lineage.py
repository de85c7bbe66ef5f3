"""Walking snapshot summaries from a manifest's snapshot back to the raw inputs (real catalog)."""

from __future__ import annotations

from lakehouse.catalog import ensure_table
from lakehouse.commit import Run, commit_files
from lakehouse.refs import PinnedRef
from lakehouse.schemas import DOCUMENT_SCHEMA
from trainer.lineage import format_lineage, pipeline_runs


def commit(catalog, table: str, job: str, run_id: str, inputs: list[dict], stats: dict) -> int:
    identifier = tuple(table.split("."))
    ensure_table(catalog, identifier, DOCUMENT_SCHEMA)
    run = Run(job=job, run_id=run_id, params={"p": run_id}, inputs=inputs)
    return commit_files(catalog, identifier, [], run, stats).snapshot_id


def test_runs_are_walked_back_to_the_raw_inputs(catalog):
    first = commit(catalog, "raw.code", "ingest", "ing-1", [{"uri": "file:///src/a"}], {"kept": 5})
    second = commit(catalog, "raw.code", "ingest", "ing-2", [{"uri": "file:///src/b"}], {"kept": 3})
    raw = PinnedRef(("raw", "code"), second, None).as_input()
    deduped = commit(catalog, "dedup.code", "dedup", "dd-1", [raw], {"kept": 7})
    dedup_input = PinnedRef(("dedup", "code"), deduped, None).as_input()
    filtered = commit(catalog, "filtered.code", "filter", "fl-1", [dedup_input], {"kept": 6})

    (filter_run,) = pipeline_runs(catalog, "filtered.code", filtered)
    assert (filter_run["job"], filter_run["run_id"], filter_run["stats"]) == ("filter", "fl-1", {"kept": 6})
    (dedup_run,) = filter_run["inputs"][0]["runs"]
    assert dedup_run["job"] == "dedup" and dedup_run["params"] == {"p": "dd-1"}
    ingests = dedup_run["inputs"][0]["runs"]
    # Both appends make up raw.code@second: both ingests are in its lineage, newest first.
    assert [r["run_id"] for r in ingests] == ["ing-2", "ing-1"]
    assert [r["inputs"] for r in ingests] == [[{"uri": "file:///src/b"}], [{"uri": "file:///src/a"}]]
    assert pipeline_runs(catalog, "raw.code", first)[0]["run_id"] == "ing-1"

    text = format_lineage(
        {
            "checkpoint": "runs/x/checkpoints/step-4",
            "step": 4,
            "code_version": "0.1.0",
            "manifest": {"path": "m.json", "fingerprint": "abc"},
            "tokenizer": {"path": "t.json", "sha256": "f" * 64},
            "loader_position": {"next_global_batch": 4, "sequences": 32, "tokens": 1024},
            "components": [
                {"name": "code", "weight": 1.0, "table": "filtered.code", "snapshot_id": filtered, "runs": [filter_run]}
            ],
        }
    )
    assert "filter run fl-1" in text and "dedup run dd-1" in text and "from file:///src/a" in text
