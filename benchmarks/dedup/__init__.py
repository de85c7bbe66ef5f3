"""Dedup benchmark: our Spark job vs datatrove's MinHash pipeline on real source code.

.venv/bin/python -m benchmarks.dedup --mb 200
"""
