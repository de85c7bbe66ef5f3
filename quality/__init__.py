"""Quality filters (one small class each), filter configs and data-validation suites."""
