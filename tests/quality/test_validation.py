"""The GX suites on crafted Spark DataFrames: each check fails when its rule is broken."""

from __future__ import annotations

from quality.validation import (
    accounting_checks,
    accounting_frame,
    document_checks,
    documents_frame,
    quarantine_checks,
    validate,
)

DOCS = "doc_id string, source string, text string, n_bytes long"


def test_each_suite_catches_what_it_is_for(spark):
    good = spark.createDataFrame([("a", "web", "alpha", 5), ("b", "web", "beta", 4)], DOCS)
    bad = spark.createDataFrame([("a", "web", "", 0), ("a", "code", "x" * 50, 50)], DOCS)
    inputs = spark.createDataFrame([("a",), ("b",), ("c",)], "doc_id string")
    refused = spark.createDataFrame(
        [("b", "filter", "too_small", "size")], "doc_id string, stage string, reason string, filter string"
    )

    report = validate(
        {
            "good": (documents_frame(good), document_checks((1, 10), ["web"])),
            "bad": (documents_frame(bad), document_checks((1, 10), ["web"])),
            "quarantine": (refused, quarantine_checks("filter")),
            # a kept twice-over, b both kept and quarantined (as bad's frame has it), c lost
            "accounting": (accounting_frame(inputs, documents_frame(bad), refused), accounting_checks(3)),
        }
    )

    results = {suite.name: suite for suite in report.suites}
    assert results["good"].success and results["quarantine"].success
    assert sorted(results["bad"].failed) == [
        "expect_column_values_to_be_between(n_bytes)",
        "expect_column_values_to_be_between(text_chars)",
        "expect_column_values_to_be_in_set(source)",
        "expect_column_values_to_be_unique(doc_id)",
    ]
    assert sorted(results["accounting"].failed) == [
        "expect_column_values_to_be_unique(doc_id)",
        "expect_column_values_to_not_be_null(outcome)",
        "expect_table_row_count_to_equal()",
    ]
    assert not report.success and len(report.failures()) == 7
    assert results["bad"].html.startswith("<!DOCTYPE html>") and '"success": false' in report.as_json()
