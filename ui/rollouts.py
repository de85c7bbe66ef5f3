"""Reading ``rl.rollouts`` for the rollouts pages: filtered pages of an RL run's rollouts, one
rollout, and the prompt of its task.

As for ``evals.samples`` (ui/samples.py): filters are Iceberg row filters, lists read only the
small columns (``LIST_COLUMNS``: no completion, no test output), and what a page shows is kept per
the table's metadata file (ui/cache.py), so the first request after a commit reads afresh.

A rollout's prompt is not in its row: the run's commits to ``rl.rollouts`` name the ``rl.tasks``
snapshot they drew tasks from (their ``factory.inputs``), and that snapshot's row has it. A
generated family's task (``arithmetic/...``) names no table: its id makes the prompt again.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from cachetools.keys import hashkey
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo
from pyiceberg.table import Table

from lakehouse.commit import recorded_inputs, summary_properties
from lakehouse.errors import InputError
from lakehouse.refs import parse_identifier
from rl.families import arithmetic_tasks
from rl.rollouts_table import KINDS, ROLLOUTS_TABLE
from ui.cache import memo, pinned
from ui.samples import Page, page_of, task_order
from ui.sources import BadRequest, Sources, is_number

PAGE_SIZE = 50
LIST_COLUMNS = (
    "rollout_id",
    "run_id",
    "kind",
    "step",
    "task_id",
    "sample_index",
    "reward",
    "passed",
    "total",
    "outcome",
    "duration_s",
)


@dataclass(frozen=True)
class Filters:
    run: str = ""  # run_id: the RL run's hash
    kind: str = ""  # train, heldout, or "" for both
    step: str = ""  # a number, or "" for all (a query string's empty field)
    task: str = ""
    outcome: str = ""

    def __post_init__(self) -> None:
        if self.kind and self.kind not in KINDS:
            raise BadRequest(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.step and not is_number(self.step):
            raise BadRequest(f"step must be a whole number, got {self.step!r}")

    def expression(self) -> BooleanExpression:
        columns = (("run_id", self.run), ("kind", self.kind), ("task_id", self.task), ("outcome", self.outcome))
        parts = [EqualTo(column, value) for column, value in columns if value]
        if self.step:
            parts.append(EqualTo("step", int(self.step)))
        return functools.reduce(lambda left, right: left & right, parts, AlwaysTrue())


@dataclass(frozen=True)
class Summary:
    """What the filters offer: the table's runs (run_id -> run_dir), steps and outcomes."""

    runs: dict[str, str]
    steps: list[int]
    outcomes: list[str]


def rollouts_table(sources: Sources) -> Table | None:
    table = sources.optional_table(ROLLOUTS_TABLE)
    return table if table is not None and table.current_snapshot() is not None else None


@memo(8, key=lambda table: hashkey(table.metadata_location))
def summary(table: Table) -> Summary:
    rows = table.scan(selected_fields=("run_id", "run_dir", "step", "outcome")).to_arrow()
    runs = rows.group_by(["run_id", "run_dir"]).aggregate([]).to_pylist()
    return Summary(
        {r["run_id"]: r["run_dir"] for r in sorted(runs, key=lambda r: (r["run_dir"], r["run_id"]))},
        sorted(set(rows["step"].to_pylist())),
        sorted(set(rows["outcome"].to_pylist())),
    )


@memo(256, key=lambda table, filters, page_no: hashkey(table.metadata_location, filters, page_no))
def list_rollouts(table: Table, filters: Filters, page_no: int) -> Page:
    """Page ``page_no`` of the rollouts matching ``filters``, by run, step, kind, task and sample."""
    if page_no < 0:  # raised, not kept: memo keeps results only
        raise BadRequest("page_no must be zero or more")
    rows = table.scan(row_filter=filters.expression(), selected_fields=LIST_COLUMNS).to_arrow().to_pylist()
    rows.sort(
        key=lambda r: (r["run_id"], r["step"], KINDS.index(r["kind"]), task_order(r["task_id"]), r["sample_index"])
    )
    return page_of(rows, page_no, PAGE_SIZE)


@memo(128, key=lambda table, rollout_id: hashkey(table.metadata_location, rollout_id))
def read_rollout(table: Table, rollout_id: str) -> dict[str, Any] | None:
    rows = table.scan(row_filter=EqualTo("rollout_id", rollout_id)).to_arrow().to_pylist()
    return rows[0] if rows else None


def task_prompt(sources: Sources, table: Table, row: dict[str, Any]) -> tuple[str | None, str]:
    """The prompt of a rollout's task, and where it came from (or why it is not at hand)."""
    if row["task_id"] in _arithmetic_prompts():
        return _arithmetic_prompts()[row["task_id"]], "the arithmetic family (rl/families.py), from the task's id"
    try:
        found = run_tasks(table, row["run_id"])
    except InputError as exc:  # a commit by another tool: the rest of the rollout's page still shows
        return None, str(exc)
    if found is None:
        return None, "the run's rollouts name no tasks table"
    name, snapshot_id = found
    tasks = sources.optional_table(parse_identifier(name))
    if tasks is None or tasks.metadata.snapshot_by_id(snapshot_id) is None:
        return None, f"{name}@{snapshot_id} is no longer in the catalog"
    prompt = _table_prompt(tasks, snapshot_id, row["task_id"])
    if prompt is None:
        return None, f"no task {row['task_id']} in {name}@{snapshot_id}"
    return prompt, f"{name}@{snapshot_id}"


@memo(64, key=lambda table, run_id: hashkey(table.metadata_location, run_id))
def run_tasks(table: Table, run_id: str) -> tuple[str, int] | None:
    """The tasks table and snapshot an RL run drew from, as its commits to ``rl.rollouts`` recorded."""
    for snapshot in table.snapshots():
        summary = summary_properties(snapshot)
        if summary.get("factory.rl-run-id") != run_id:
            continue
        where = f"{'.'.join(table.name())}@{snapshot.snapshot_id}'s factory.inputs"
        for entry in recorded_inputs(summary.get("factory.inputs") or None, where):
            if "table" in entry:
                return entry["table"], entry["snapshot_id"]
    return None


@memo(256, key=lambda table, snapshot_id, task_id: pinned(table, snapshot_id, task_id))
def _table_prompt(table: Table, snapshot_id: int, task_id: str) -> str | None:
    scan = table.scan(row_filter=EqualTo("task_id", task_id), snapshot_id=snapshot_id, selected_fields=("prompt",))
    rows = scan.to_arrow().to_pylist()
    return rows[0]["prompt"] if rows else None


@functools.cache
def _arithmetic_prompts() -> dict[str, str]:
    return {task.id: task.prompt for task in arithmetic_tasks()}
