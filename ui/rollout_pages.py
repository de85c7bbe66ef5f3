"""The pages over ``rl.rollouts``: an RL run's rollouts filtered and paged, and one rollout."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from rl.rollouts_table import KINDS
from ui import rollouts
from ui.checkpoints import Labels
from ui.sources import NotFound, Sources


def register(app: FastAPI, sources: Sources, page: Callable[..., HTMLResponse]) -> None:
    @app.get("/rollouts", response_class=HTMLResponse)
    def rollouts_page(
        run: str = "", kind: str = "", step: str = "", task: str = "", outcome: str = "", page_no: int = 0
    ):
        filters = rollouts.Filters(run, kind, step, task, outcome)
        table = rollouts.rollouts_table(sources)
        if table is None:
            return page("rollouts.html", filters=filters, found=None)
        return page(
            "rollouts.html",
            filters=filters,
            found=rollouts.list_rollouts(table, filters, page_no),
            summary=rollouts.summary(table),
            labels=Labels(sources),
            kinds=KINDS,
        )

    @app.get("/rollouts/{rollout_id}", response_class=HTMLResponse)
    def rollout_page(rollout_id: str):
        table = rollouts.rollouts_table(sources)
        row = rollouts.read_rollout(table, rollout_id) if table is not None else None
        if row is None:
            raise NotFound(f"no rollout {rollout_id!r} in rl.rollouts")
        prompt, prompt_from = rollouts.task_prompt(sources, table, row)
        labels = Labels(sources)
        return page("rollout.html", row=row, prompt=prompt, prompt_from=prompt_from, run_key=labels.run(row["run_dir"]))
