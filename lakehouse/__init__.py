"""The ground floor: catalog access, refs, table schemas, the commit protocol and
write-audit-publish, the error types, the code version and Parquet file access.

Every other package builds on it; it imports only pyiceberg, pyarrow, sqlalchemy's errors and the
standard library (docs/architecture.md, "Floors")."""
