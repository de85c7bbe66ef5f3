"""Spark jobs (ingest, dedup, filter), one module per job, and the Spark steps they run."""
