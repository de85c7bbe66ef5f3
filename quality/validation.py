"""Data checks with Great Expectations (1.x) on Spark DataFrames, before a snapshot is published.

The suites are plain data (``Check``: an expectation's class name and arguments), so they can
be read and tested without importing GX, which takes seconds; ``validate`` imports it, runs
each suite on its DataFrame as one whole-dataframe batch in an ephemeral context, and renders
GX's own JSON result and HTML report, which ``write_report`` stores beside the table.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    """One expectation: a class of ``great_expectations.expectations`` and its arguments."""

    expectation: str
    kwargs: Mapping[str, object] = field(default_factory=dict)


def document_checks(n_bytes_bounds: tuple[int, int] | None, sources: Sequence[str]) -> list[Check]:
    """What every published document table must satisfy (on ``documents_frame``)."""
    checks = [
        Check("ExpectColumnValuesToNotBeNull", {"column": "doc_id"}),
        Check("ExpectColumnValuesToBeUnique", {"column": "doc_id"}),
        Check("ExpectColumnValuesToNotBeNull", {"column": "text_chars"}),  # text is there…
        Check("ExpectColumnValuesToBeBetween", {"column": "text_chars", "min_value": 1}),  # …and not empty
    ]
    if n_bytes_bounds is not None:
        low, high = n_bytes_bounds
        checks.append(
            Check("ExpectColumnValuesToBeBetween", {"column": "n_bytes", "min_value": low, "max_value": high})
        )
    if sources:
        checks.append(Check("ExpectColumnValuesToBeInSet", {"column": "source", "value_set": sorted(sources)}))
    return checks


def quarantine_checks(stage: str) -> list[Check]:
    """What the quarantine rows of one run must satisfy: each names its document and why."""
    return [
        Check("ExpectColumnValuesToNotBeNull", {"column": "doc_id"}),
        Check("ExpectColumnValuesToBeUnique", {"column": "doc_id"}),
        Check("ExpectColumnValuesToBeInSet", {"column": "stage", "value_set": [stage]}),
        Check("ExpectColumnValuesToNotBeNull", {"column": "reason"}),
        Check("ExpectColumnValuesToNotBeNull", {"column": "filter"}),
    ]


def accounting_checks(documents_in: int) -> list[Check]:
    """On ``accounting_frame``: every input document has exactly one outcome, and nothing else does."""
    return [
        Check("ExpectTableRowCountToEqual", {"value": documents_in}),  # kept + quarantined = input
        Check("ExpectColumnValuesToBeUnique", {"column": "doc_id"}),  # none both kept and quarantined
        Check("ExpectColumnValuesToNotBeNull", {"column": "outcome"}),  # no input document lost
        Check("ExpectColumnValuesToNotBeNull", {"column": "in_input"}),  # no output from nowhere
    ]


def documents_frame(documents: DataFrame) -> DataFrame:
    """The columns the document checks read, the text reduced to its length.

    Each expectation is a Spark job of its own; on these few columns, cached once, they cost
    milliseconds instead of reading every text again.
    """
    return documents.select("doc_id", "source", "n_bytes", F.length("text").alias("text_chars"))


def accounting_frame(input_ids: DataFrame, kept_ids: DataFrame, quarantined_ids: DataFrame) -> DataFrame:
    """One row per (document, outcome) matched against the input: ``doc_id, in_input, outcome``."""
    outcomes = kept_ids.select("doc_id", F.lit("kept").alias("outcome")).unionByName(
        quarantined_ids.select("doc_id", F.lit("quarantined").alias("outcome"))
    )
    present = input_ids.select("doc_id", F.lit(True).alias("in_input"))
    return present.join(outcomes, "doc_id", "full_outer")


@dataclass(frozen=True)
class SuiteResult:
    name: str
    success: bool
    evaluated: int
    failed: list[str]  # "expectation(column)" of each failed check
    result: dict  # GX's validation result as JSON
    html: str  # GX's rendered report page


@dataclass(frozen=True)
class ValidationReport:
    suites: list[SuiteResult]

    @property
    def success(self) -> bool:
        return all(s.success for s in self.suites)

    def failures(self) -> list[str]:
        return [f"{s.name}: {f}" for s in self.suites for f in s.failed]

    def as_json(self, **extra: object) -> str:
        body = {
            **extra,
            "success": self.success,
            "suites": {s.name: s.result for s in self.suites},
        }
        return json.dumps(body, indent=2, sort_keys=True, default=str)


def validate(suites: Mapping[str, tuple[DataFrame, Sequence[Check]]]) -> ValidationReport:
    """Run each named suite of checks on its DataFrame; GX is imported here, not before."""
    logging.getLogger("great_expectations").setLevel(logging.WARNING)  # its INFO lines are internals
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.render.renderer import ValidationResultsPageRenderer
    from great_expectations.render.view import DefaultJinjaPageView

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_spark("factory")
    results = []
    for name, (frame, checks) in suites.items():
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
        suite = context.suites.add(gx.ExpectationSuite(name=name))
        for check in checks:
            suite.add_expectation(getattr(gxe, check.expectation)(**check.kwargs))
        definition = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
        # Pass/fail alone needs about half the Spark jobs; a failing suite is run again for
        # the counts and sample values that explain it.
        outcome = definition.run(batch_parameters={"dataframe": frame}, result_format="BOOLEAN_ONLY")
        if not outcome.success:
            outcome = definition.run(batch_parameters={"dataframe": frame}, result_format="SUMMARY")
        failed = [
            f"{r.expectation_config.type}({r.expectation_config.kwargs.get('column', '')})"
            for r in outcome.results
            if not r.success
        ]
        html = DefaultJinjaPageView().render(ValidationResultsPageRenderer().render(outcome))
        results.append(
            SuiteResult(name, bool(outcome.success), len(outcome.results), failed, outcome.to_json_dict(), html)
        )
        log.info(
            "validation %s: %s (%d checks)", name, "passed" if outcome.success else f"FAILED {failed}", len(checks)
        )
    return ValidationReport(results)


def write_report(report: ValidationReport, location: str, io_properties: Mapping[str, str], **extra: object) -> str:
    """Store ``validation.json`` and one GX HTML page per suite under ``location``; return the JSON's URI."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    io = PyArrowFileIO(dict(io_properties))
    location = location.rstrip("/")
    files = {"validation.json": report.as_json(**extra)}
    files.update({f"{suite.name}.html": suite.html for suite in report.suites})
    for name, content in files.items():
        with io.new_output(f"{location}/{name}").create(overwrite=True) as out:
            out.write(content.encode("utf-8"))
    return f"{location}/validation.json"
