"""A run page's plots: SVG drawn by hand, each kind of metric on an axis of its own."""

from __future__ import annotations

import base64
import re

import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from lakehouse.schemas import EVAL_RESULTS_SCHEMA, arrow_schema
from ui.app import create_app
from ui.plots import line_plot
from ui.sources import Sources


def svg(uri: str) -> str:
    prefix = "data:image/svg+xml;base64,"
    assert uri.startswith(prefix)
    return base64.b64decode(uri.removeprefix(prefix)).decode()


def y_ticks(drawing: str) -> list[float]:
    return [float(v) for v in re.findall(r'text-anchor="end">([^<]+)</text>', drawing)]


def eval_row(run_dir, step: int, suite: str, metric: str, value: float) -> dict:
    return {
        "run_id": str(run_dir),
        "checkpoint": f"{run_dir}/checkpoints/step-{step}",
        "step": step,
        "manifest_fingerprint": "sha256:0",
        "snapshot_ids": "{}",
        "suite": suite,
        "metric": metric,
        "value": value,
        "samples": 1,
        "code_version": "test",
        "eval_run_id": f"eval-{suite}",
    }


def test_humaneval_pass_at_1_and_the_problem_count_are_drawn_on_axes_of_their_own(catalog, factory_home):
    run_dir = (factory_home / "runs" / "coder").resolve()
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("")
    rows = [
        eval_row(run_dir, 10, "humaneval", "pass@1", 0.0),
        eval_row(run_dir, 20, "humaneval", "pass@1", 0.125),
        eval_row(run_dir, 10, "humaneval", "problems", 164.0),
        eval_row(run_dir, 20, "humaneval", "problems", 164.0),
        eval_row(run_dir, 10, "heldout", "loss/code", 7.5),
        eval_row(run_dir, 20, "heldout", "loss/code", 6.5),
        eval_row(run_dir, 20, "heldout", "loss/text", 7.0),
    ]
    catalog.create_namespace_if_not_exists("evals")
    schema = arrow_schema(EVAL_RESULTS_SCHEMA)
    catalog.create_table(("evals", "results"), EVAL_RESULTS_SCHEMA).append(pa.Table.from_pylist(rows, schema=schema))

    page = TestClient(create_app(Sources(None, [factory_home]))).get("/runs/runs/coder")
    assert page.status_code == 200, page.text[-500:]
    plots = dict(re.findall(r'<img alt="([^"]*)" title="[^"]*" src="([^"]*)">', page.text))
    assert list(plots) == [
        "heldout (evals.results)",  # loss/code and loss/text: one kind, one plot
        "humaneval pass@1 (evals.results)",
        "humaneval problems (evals.results)",
    ]
    passed, problems = svg(plots["humaneval pass@1 (evals.results)"]), svg(plots["humaneval problems (evals.results)"])
    assert passed.count("<polyline") == 1 and problems.count("<polyline") == 1
    assert max(y_ticks(passed)) <= 1  # a fraction on its own scale, not flattened under 164
    assert min(y_ticks(problems)) <= 164 <= max(y_ticks(problems))
    assert svg(plots["heldout (evals.results)"]).count("<polyline") == 2


def test_a_plot_spans_its_values_on_round_ticks_and_escapes_its_names():
    drawing = svg(line_plot("loss <b>", (("a&b", ((1, 0.25), (2, 0.75))), ("<c>", ((1, 0.5),))), "loss"))
    assert drawing.startswith("<svg") and drawing.count("<polyline") == 2
    assert y_ticks(drawing) == [0.2, 0.4, 0.6, 0.8]
    assert "loss &lt;b&gt;" in drawing and "a&amp;b" in drawing and "&lt;c&gt;" in drawing
    assert "<b>" not in drawing and "<c>" not in drawing
    assert line_plot("t", (("s", ((1, 2.0),)),)) == line_plot("t", (("s", ((1, 2.0),)),))  # the same bytes


@pytest.mark.parametrize("values", [(float("nan"), 1.0), (3.0, 3.0), (1e-13, 2e-13), (-5.0, 1e9)])
def test_a_plot_draws_constant_tiny_huge_and_missing_values(values):
    drawing = svg(line_plot("t", (("s", ((1, values[0]), (2, values[1]))),)))
    ticks = y_ticks(drawing)
    finite = [v for v in values if v == v]
    assert len(set(ticks)) == len(ticks) >= 2 and min(ticks) <= min(finite) and max(finite) <= max(ticks)
    assert "nan" not in drawing.lower()
