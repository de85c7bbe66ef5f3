"""Reading ``evals.samples`` for the inspection pages: filtered pages, one sample, two checkpoints'
verdicts side by side, and the pairs a blind rating can show.

No request reads the table whole. Filters are Iceberg row filters (files whose column bounds rule
them out are not opened), lists read only the small columns (``KEY_COLUMNS``), and the long text
columns (prompt, completion, test, output) are read for the rows a page shows, by ``sample_id``.
What the filters' choices and the ratings' pairs need (which run, checkpoint and suite, which task
each checkpoint has samples of) is read once per table snapshot and kept (``_SUMMARIES``).

What a page shows is kept too, per the table's metadata file (ui/cache.py), so that twenty people
browsing the samples do not each scan the table again: a page of a list, a comparison's page, one
sample, and each sample's prompt and completion (a blind rating draws a random pair on every
request, so its page cannot be kept whole; its two samples' texts can). The first request after
a commit reads afresh.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache
from cachetools.keys import hashkey
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo, In, IsNull
from pyiceberg.table import Table

from ui.cache import memo
from ui.sources import BadRequest, Sources

SAMPLES_TABLE = ("evals", "samples")
PAGE_SIZE = 50
COMPARE_PAGE_SIZE = 20
KEY_COLUMNS = ("sample_id", "run_id", "checkpoint", "step", "suite", "task_id", "sample_index", "passed")
LIST_COLUMNS = (*KEY_COLUMNS, "exit_reason", "duration_s", "score")
VERDICTS = {
    "pass": EqualTo("passed", True),
    "fail": EqualTo("passed", False),
    "unjudged": IsNull("passed"),
}
_SUMMARIES_KEPT = 8
_TEXTS_KEPT_CHARS = 32 * 2**20  # prompts and completions kept, in characters of text


@dataclass(frozen=True)
class Filters:
    run: str = ""  # run_id: the training run's folder
    checkpoint: str = ""
    suite: str = ""
    task: str = ""
    verdict: str = ""  # pass, fail, unjudged, or "" for all

    def __post_init__(self) -> None:
        if self.verdict and self.verdict not in VERDICTS:
            raise BadRequest(f"verdict must be one of {', '.join(VERDICTS)}, got {self.verdict!r}")

    def expression(self) -> BooleanExpression:
        columns = (("run_id", self.run), ("checkpoint", self.checkpoint), ("suite", self.suite), ("task_id", self.task))
        parts = [EqualTo(column, value) for column, value in columns if value]
        if self.verdict:
            parts.append(VERDICTS[self.verdict])
        return functools.reduce(lambda left, right: left & right, parts, AlwaysTrue())


@dataclass(frozen=True)
class Summary:
    """What a snapshot of ``evals.samples`` holds, by its small columns."""

    checkpoints: list[dict[str, Any]]  # run_id, checkpoint, step, suite: one per distinct combination
    # suite -> task -> checkpoint -> sample ids, for the blind ratings' pairs
    by_task: dict[str, dict[str, dict[str, list[str]]]] = field(repr=False)

    @property
    def suites(self) -> list[str]:
        return sorted({c["suite"] for c in self.checkpoints})

    @property
    def runs(self) -> list[str]:
        return sorted({c["run_id"] for c in self.checkpoints})

    def suite_checkpoints(self, suite: str) -> list[str]:
        ordered = sorted((c for c in self.checkpoints if c["suite"] == suite), key=lambda c: (c["run_id"], c["step"]))
        return list(dict.fromkeys(c["checkpoint"] for c in ordered))


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    total: int
    page_no: int
    pages: int


@dataclass(frozen=True)
class Comparison:
    task_id: str
    change: str  # "fail → pass", "pass → fail", "same", "only A", "only B", "unjudged"
    a: dict[str, Any] | None  # verdict, passes, samples, and the first sample (sample_id, prompt, completion)
    b: dict[str, Any] | None


def samples_table(sources: Sources) -> Table | None:
    table = sources.optional_table(SAMPLES_TABLE)
    return table if table is not None and table.current_snapshot() is not None else None


_summaries: OrderedDict[tuple[str, int], Summary] = OrderedDict()
_summaries_lock = threading.Lock()


def summary(table: Table) -> Summary:
    """The table's ``Summary`` at its current snapshot, read once per snapshot."""
    key = (table.metadata_location, table.current_snapshot().snapshot_id)
    with _summaries_lock:
        if key in _summaries:
            _summaries.move_to_end(key)
            return _summaries[key]
    rows = table.scan(selected_fields=("sample_id", "run_id", "checkpoint", "step", "suite", "task_id")).to_arrow()
    combos = rows.group_by(["run_id", "checkpoint", "step", "suite"]).aggregate([]).to_pylist()
    by_task: dict[str, dict[str, dict[str, list[str]]]] = {}
    for row in rows.select(["suite", "task_id", "checkpoint", "sample_id"]).to_pylist():
        by_task.setdefault(row["suite"], {}).setdefault(row["task_id"], {}).setdefault(row["checkpoint"], []).append(
            row["sample_id"]
        )
    found = Summary(combos, by_task)
    with _summaries_lock:
        _summaries[key] = found
        while len(_summaries) > _SUMMARIES_KEPT:
            _summaries.popitem(last=False)
    return found


def list_samples(table: Table, filters: Filters, page_no: int) -> Page:
    """Page ``page_no`` of the samples matching ``filters``, by run, step, suite, task and index."""
    if page_no < 0:
        raise BadRequest("page_no must be zero or more")
    return _list_page(table, filters, page_no)


@memo(256, key=lambda table, filters, page_no: hashkey(table.metadata_location, filters, page_no))
def _list_page(table: Table, filters: Filters, page_no: int) -> Page:
    rows = table.scan(row_filter=filters.expression(), selected_fields=LIST_COLUMNS).to_arrow().to_pylist()
    rows.sort(key=lambda r: (r["run_id"], r["step"], r["suite"], task_order(r["task_id"]), r["sample_index"]))
    return page_of(rows, page_no, PAGE_SIZE)


def page_of(rows: list[dict[str, Any]], page_no: int, size: int) -> Page:
    """Page ``page_no`` of ``rows``, ``size`` rows a page."""
    pages = max(1, -(-len(rows) // size))
    return Page(rows[page_no * size : (page_no + 1) * size], len(rows), page_no, pages)


@memo(128, key=lambda table, sample_id: hashkey(table.metadata_location, sample_id))
def read_sample(table: Table, sample_id: str) -> dict[str, Any] | None:
    rows = table.scan(row_filter=EqualTo("sample_id", sample_id)).to_arrow().to_pylist()
    return rows[0] if rows else None


def _text_chars(row: dict[str, Any]) -> int:
    return 100 + len(row["prompt"] or "") + len(row["completion"] or "")


_texts: LRUCache = LRUCache(_TEXTS_KEPT_CHARS, getsizeof=_text_chars)
_texts_lock = threading.Lock()


def texts(table: Table, sample_ids: list[str], where: BooleanExpression) -> dict[str, dict[str, Any]]:
    """sample_id -> its prompt and completion, for the rows a page shows; ``where`` (the samples'
    suite and checkpoints) spares opening the files of other suites and checkpoints.
    Each sample's texts are kept per the table's metadata file; only those not kept are read."""
    # Not ui.cache.memo: one scan reads every sample the page lacks, where a memo would read each alone.
    location = table.metadata_location
    with _texts_lock:
        found = {i: _texts[location, i] for i in sample_ids if (location, i) in _texts}
    missing = [i for i in sample_ids if i not in found]
    if not missing:
        return found
    scan = table.scan(
        row_filter=where & In("sample_id", missing), selected_fields=("sample_id", "prompt", "completion")
    )
    read = {r["sample_id"]: r for r in scan.to_arrow().to_pylist()}
    with _texts_lock:
        for sample_id, row in read.items():
            if _texts.getsizeof(row) <= _texts.maxsize:  # one longer than all that is kept: shown, not kept
                _texts[location, sample_id] = row
    return found | read


def compare(table: Table, suite: str, a: str, b: str, page_no: int) -> tuple[list[Comparison], int]:
    """The tasks of ``suite`` with samples at checkpoint ``a`` or ``b``: those that went from fail
    to pass first, then pass to fail, then the rest, each in task order; and the number of pages."""
    if page_no < 0:
        raise BadRequest("page_no must be zero or more")
    return _compare(table, suite, a, b, page_no)


@memo(64, key=lambda table, suite, a, b, page_no: hashkey(table.metadata_location, suite, a, b, page_no))
def _compare(table: Table, suite: str, a: str, b: str, page_no: int) -> tuple[list[Comparison], int]:
    where = EqualTo("suite", suite) & In("checkpoint", [a, b])
    rows = table.scan(row_filter=where, selected_fields=KEY_COLUMNS).to_arrow().to_pylist()
    by_task: dict[str, dict[str, list[dict]]] = {}
    for row in rows:
        by_task.setdefault(row["task_id"], {}).setdefault(row["checkpoint"], []).append(row)
    found = []
    for task_id, sides in by_task.items():
        left, right = _side(sides.get(a)), _side(sides.get(b))
        found.append(Comparison(task_id, _change(left, right), left, right))
    rank = {"fail → pass": 0, "pass → fail": 1}
    found.sort(key=lambda c: (rank.get(c.change, 2), task_order(c.task_id)))
    pages = max(1, -(-len(found) // COMPARE_PAGE_SIZE))
    shown = found[page_no * COMPARE_PAGE_SIZE : (page_no + 1) * COMPARE_PAGE_SIZE]
    read = texts(table, [s["sample_id"] for c in shown for s in (c.a, c.b) if s], where)
    for c in shown:
        for side in (c.a, c.b):
            if side:
                side.update(read.get(side["sample_id"], {}))
    return shown, pages


def _side(rows: list[dict] | None) -> dict[str, Any] | None:
    """A task's samples at one checkpoint: it passes when any sample passed (pass@k, k samples)."""
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r["sample_index"])
    verdicts = [r["passed"] for r in rows]
    if any(verdicts):
        verdict = "pass"
    elif all(v is None for v in verdicts):
        verdict = "unjudged"
    else:
        verdict = "fail"
    return {**rows[0], "verdict": verdict, "passes": sum(bool(v) for v in verdicts), "samples": len(rows)}


def _change(a: dict | None, b: dict | None) -> str:
    if a is None or b is None:
        return "only B" if a is None else "only A"
    if "unjudged" in (a["verdict"], b["verdict"]):
        return "unjudged"
    return "same" if a["verdict"] == b["verdict"] else f"{a['verdict']} → {b['verdict']}"


def task_order(task_id: str) -> tuple:
    """HumanEval/2 before HumanEval/10: digits compared as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", task_id))
