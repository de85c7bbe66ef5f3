"""Iceberg schemas of the tables the jobs write (docs/architecture.md, "Tables")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, BooleanType, DoubleType, LongType, NestedField, StringType

from lakehouse.errors import InputError

if TYPE_CHECKING:
    from pyiceberg.table import Table

DOCUMENT_SCHEMA = Schema(
    NestedField(1, "doc_id", StringType(), required=True, doc="stable id, unique in the table"),
    NestedField(2, "source", StringType(), required=True, doc="source name given at ingest"),
    NestedField(3, "text", StringType(), required=True, doc="UTF-8 text"),
    NestedField(4, "path", StringType(), required=False, doc="file path, URL or origin"),
    NestedField(5, "lang", StringType(), required=False, doc="programming or natural language"),
    NestedField(6, "n_bytes", LongType(), required=False, doc="size of text in UTF-8 bytes"),
)

QUARANTINE_SCHEMA = Schema(
    NestedField(1, "doc_id", StringType(), required=True),
    NestedField(2, "source", StringType(), required=True),
    NestedField(3, "stage", StringType(), required=True, doc="ingest, dedup, filter, …"),
    NestedField(4, "reason", StringType(), required=True, doc="short machine-readable reason"),
    NestedField(5, "detail", StringType(), required=False, doc="what exactly was wrong"),
    NestedField(6, "path", StringType(), required=False),
    NestedField(7, "record", BinaryType(), required=False, doc="the record, or its first bytes"),
    NestedField(8, "run_id", StringType(), required=True, doc="the run that refused it"),
)

# One row per input file an ingest run read (docs/jobs.md, "Ingest"): `factory ingest
# --only-new-files` skips a file whose (relpath, size) is listed for its output already.
INGESTED_FILES_SCHEMA = Schema(
    NestedField(1, "output", StringType(), required=True, doc="the documents table the file went to"),
    NestedField(2, "relpath", StringType(), required=True, doc="input-relative path the doc ids come from"),
    NestedField(3, "size", LongType(), required=True, doc="the file's size in bytes when read"),
    NestedField(4, "uri", StringType(), required=True, doc="where the file was read"),
    NestedField(5, "run_id", StringType(), required=True, doc="the ingest run that read it"),
)

# Optional quarantine columns a stage may add (the filter job does). A quarantine table made
# without them gains them by schema evolution (catalog.ensure_table); older rows read null.
QUARANTINE_SCHEMA_WITH_METRICS = Schema(
    *QUARANTINE_SCHEMA.fields,
    NestedField(9, "filter", StringType(), required=False, doc="the filter (or check) that refused it"),
    NestedField(10, "metrics", StringType(), required=False, doc="JSON of the values behind the reason"),
)

# One row per input document of a dedup run: which cluster it is in and why it was kept or removed.
CLUSTERS_SCHEMA = Schema(
    NestedField(1, "doc_id", StringType(), required=True),
    NestedField(2, "cluster_id", StringType(), required=True, doc="smallest input doc_id of the cluster"),
    NestedField(3, "kept", BooleanType(), required=True, doc="this document is in the output"),
    NestedField(4, "cluster_size", LongType(), required=True, doc="input documents in the cluster"),
    NestedField(5, "duplicate_of", StringType(), required=False, doc="doc_id of the cluster's kept document"),
    NestedField(6, "against", BooleanType(), required=True, doc="duplicate_of is in the --against snapshot"),
    NestedField(7, "match", StringType(), required=False, doc="exact (same normalised text) or near; null if kept"),
    NestedField(8, "similarity", DoubleType(), required=False, doc="Jaccard to duplicate_of estimated by MinHash"),
    NestedField(9, "jaccard", DoubleType(), required=False, doc="exact Jaccard of the shingles with duplicate_of"),
)

# One row per metric of one suite's evaluation of one checkpoint (docs/architecture.md, "Eval
# results"): what was measured, on which checkpoint, trained on which data, by which code.
EVAL_RESULTS_SCHEMA = Schema(
    NestedField(1, "run_id", StringType(), required=True, doc="the training run: its folder, absolute"),
    NestedField(2, "checkpoint", StringType(), required=True, doc="the checkpoint folder, absolute"),
    NestedField(3, "step", LongType(), required=True, doc="the checkpoint's training step"),
    NestedField(4, "manifest_fingerprint", StringType(), required=True, doc="the manifest it was trained on"),
    NestedField(5, "snapshot_ids", StringType(), required=True, doc="JSON object: table -> pinned snapshot id"),
    NestedField(6, "suite", StringType(), required=True, doc="heldout, humaneval, ..."),
    NestedField(7, "metric", StringType(), required=True, doc="loss/<component>, pass@1, ..."),
    NestedField(8, "value", DoubleType(), required=True),
    NestedField(9, "samples", LongType(), required=True, doc="tokens (heldout) or completions per problem"),
    NestedField(10, "code_version", StringType(), required=True, doc="the evaluating code (lakehouse/version.py)"),
    NestedField(11, "eval_run_id", StringType(), required=True, doc="the eval run (factory.run-id of its commit)"),
)

# One row per sample an eval generated or scored (``evals.samples``): what the model wrote, how it
# was judged, and how to reproduce it. The sandbox's output is kept bounded (SAMPLE_OUTPUT_BYTES)
# so one noisy program cannot bloat the table.
EVAL_SAMPLES_SCHEMA = Schema(
    NestedField(1, "sample_id", StringType(), required=True, doc="hash of eval_run_id, task_id and sample_index"),
    NestedField(2, "eval_run_id", StringType(), required=True, doc="the eval run (as in evals.results)"),
    NestedField(3, "run_id", StringType(), required=True, doc="the training run: its folder, absolute"),
    NestedField(4, "checkpoint", StringType(), required=True, doc="the checkpoint folder, absolute"),
    NestedField(5, "step", LongType(), required=True, doc="the checkpoint's training step"),
    NestedField(6, "suite", StringType(), required=True, doc="humaneval, humaneval_bpb, ..."),
    NestedField(7, "task_id", StringType(), required=True, doc="HumanEval/0, ..."),
    NestedField(8, "sample_index", LongType(), required=True, doc="0 .. samples-1 for the task"),
    NestedField(9, "prompt", StringType(), required=True),
    NestedField(10, "completion", StringType(), required=True, doc="as generated, after the stop strings"),
    NestedField(11, "test", StringType(), required=False, doc="the task's test program, if it has one"),
    NestedField(12, "passed", BooleanType(), required=False, doc="null for suites that score, not judge"),
    NestedField(13, "exit_reason", StringType(), required=False, doc="the sandbox's: exit, timeout, memory, ..."),
    NestedField(14, "stdout", StringType(), required=False, doc="bounded excerpt"),
    NestedField(15, "stderr", StringType(), required=False, doc="bounded excerpt"),
    NestedField(16, "duration_s", DoubleType(), required=False, doc="the sandboxed program's wall time"),
    NestedField(17, "score", DoubleType(), required=False, doc="a scoring suite's value, e.g. bits per byte"),
    NestedField(18, "temperature", DoubleType(), required=True, doc="0 for greedy"),
    NestedField(19, "top_p", DoubleType(), required=True),
    NestedField(20, "max_new_tokens", LongType(), required=True),
    NestedField(21, "seed", LongType(), required=True, doc="the sampling seed: reproduces the completion"),
    NestedField(22, "code_version", StringType(), required=True, doc="the evaluating code (lakehouse/version.py)"),
)
SAMPLE_OUTPUT_BYTES = 4096

# One row per blind rating (``evals.ratings``): two completions of one task by two checkpoints,
# shown as A and B in random order, and which one a person preferred. The rater's name is the only
# thing about the person kept, as they typed it (docs/architecture.md, "The UI").
EVAL_RATINGS_SCHEMA = Schema(
    NestedField(1, "rating_id", StringType(), required=True, doc="random id of the pair shown"),
    NestedField(2, "rated_at", StringType(), required=True, doc="UTC, ISO 8601"),
    NestedField(3, "rater", StringType(), required=True, doc="the name the rater typed, as typed"),
    NestedField(4, "suite", StringType(), required=True),
    NestedField(5, "task_id", StringType(), required=True),
    NestedField(6, "checkpoint_a", StringType(), required=True, doc="the checkpoint folder shown as A"),
    NestedField(7, "sample_a", StringType(), required=True, doc="its evals.samples sample_id"),
    NestedField(8, "checkpoint_b", StringType(), required=True, doc="the checkpoint folder shown as B"),
    NestedField(9, "sample_b", StringType(), required=True),
    NestedField(10, "winner", StringType(), required=True, doc="a, b or tie"),
    NestedField(11, "code_version", StringType(), required=True, doc="the UI's code (lakehouse/version.py)"),
)

# Enough of a refused record to see what was wrong with it, bounded so one huge bad record
# cannot bloat the quarantine table.
QUARANTINE_RECORD_BYTES = 64 * 1024


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of ``schema``, every field (nested ones too) carrying its Iceberg field id
    as ``PARQUET:field_id``, which pyarrow writes into a Parquet file's schema.

    Data files carry their columns' field ids, as Iceberg's own writers do: readers that resolve
    columns by id alone (Daft, which does not apply a table's ``schema.name-mapping.default``)
    read them, and a renamed column stays the same column. pyiceberg's ``add_files`` checks the
    ids against the table's schema. Files written before ids were added are still read through
    the name mapping ``add_files`` keeps on the table (docs/architecture.md, "Tables").
    """
    return schema_to_pyarrow(schema, include_field_ids=True)


def file_schema(table: Table, columns: Schema) -> pa.Schema:
    """The Arrow schema a job writes ``columns`` of ``table`` with: typed and numbered as in the
    table's current schema, in its order. The ids come from the table, not from ``columns``: a
    table made by another job or engine, or evolved since, may number the same names otherwise."""
    return arrow_schema(table.schema().select(*(f.name for f in columns.fields)))


def require_columns(table_schema: Schema, columns: tuple[str, ...], label: str) -> None:
    """Refuse a table that lacks columns a job needs, before any work is done."""
    names = {field.name for field in table_schema.fields}
    missing = [c for c in columns if c not in names]
    if missing:
        raise InputError(f"{label} is not a document table: missing column(s) {', '.join(missing)}")
