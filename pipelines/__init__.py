"""Spark jobs (one module per job) and what they share: catalog access and the commit protocol."""
