"""Column names the floors share, apart from the schemas: a Spark task's Python worker imports
these without loading pyiceberg (seconds of start-up on every worker)."""

DOCUMENT_COLUMNS = ("doc_id", "source", "text", "path", "lang", "n_bytes")

# The column a staged row carries to name the table it is written to ("documents", "quarantine"…);
# the writer drops it (pipelines/staging.py).
TARGET_COLUMN = "_target"
