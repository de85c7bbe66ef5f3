"""Benchmarks: each one command that runs ours and the named baseline side by side in one run."""
