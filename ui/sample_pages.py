"""The pages over ``evals.samples``: the filtered list, one sample, and two checkpoints compared."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from ui import samples
from ui.checkpoints import Labels
from ui.sources import BadRequest, NotFound, Sources


def register(app: FastAPI, sources: Sources, page: Callable[..., HTMLResponse]) -> None:
    @app.get("/samples", response_class=HTMLResponse)
    def samples_page(
        run: str = "", checkpoint: str = "", suite: str = "", task: str = "", verdict: str = "", page_no: int = 0
    ):
        filters = samples.Filters(run, checkpoint, suite, task, verdict)
        table = samples.samples_table(sources)
        if table is None:
            return page("samples.html", filters=filters, found=None, summary=None, labels=Labels(sources))
        found = samples.list_samples(table, filters, page_no)
        return page(
            "samples.html",
            filters=filters,
            found=found,
            summary=samples.summary(table),
            labels=Labels(sources),
            verdicts=list(samples.VERDICTS),
            page_size=samples.PAGE_SIZE,
        )

    @app.get("/samples/compare", response_class=HTMLResponse)
    def compare_page(suite: str = "", a: str = "", b: str = "", page_no: int = 0):
        table = samples.samples_table(sources)
        summary = samples.summary(table) if table is not None else None
        choices = summary.suite_checkpoints(suite) if summary and suite else []
        for name, value in (("a", a), ("b", b)):
            if value and value not in choices:
                raise NotFound(f"checkpoint {name} ({value}) has no samples of suite {suite!r} in evals.samples")
        if a and a == b:
            raise BadRequest("choose two different checkpoints to compare")
        found, pages = samples.compare(table, suite, a, b, page_no) if a and b else ([], 1)
        return page(
            "compare.html",
            summary=summary,
            suite=suite,
            a=a,
            b=b,
            choices=choices,
            found=found,
            page_no=page_no,
            pages=pages,
            labels=Labels(sources),
        )

    @app.get("/samples/{sample_id}", response_class=HTMLResponse)
    def sample_page(sample_id: str):
        table = samples.samples_table(sources)
        row = samples.read_sample(table, sample_id) if table is not None else None
        if row is None:
            raise NotFound(f"no sample {sample_id!r} in evals.samples")
        labels = Labels(sources)
        return page("sample.html", row=row, label=labels(row["checkpoint"]), at=labels.checkpoint(row["checkpoint"]))
