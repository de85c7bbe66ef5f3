"""The ``rl.tasks`` table (docs/rl.md, "The task table") and reading it back as ``Task`` objects.

One row per validated task. A table snapshot is one whole environment: each build replaces the
table's content (write-audit-publish), so a snapshot id names the environment a learner trained
and was evaluated on. The learner sees ``prompt`` and nothing of ``original_body``: the original
is kept for validation and reference only.

    from rl.tasks import read_tasks
    tasks = read_tasks(catalog, split="train")                   # the current environment
    heldout = read_tasks(catalog, snapshot_id=s, split="heldout", single_return=True)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue, And, EqualTo
from pyiceberg.schema import Schema
from pyiceberg.types import BooleanType, DoubleType, ListType, LongType, NestedField, StringType

from lakehouse.catalog import load_table
from lakehouse.errors import InputError
from lakehouse.refs import parse_identifier
from rl.functions import compose, split_lines
from rl.sandbox import Checkout

TASKS_TABLE = "rl.tasks"
SPLITS = ("train", "heldout")
HELDOUT_PER_MILLE = 100  # a task is held out when a hash of its id falls in the first 10%

TASKS_SCHEMA = Schema(
    NestedField(1, "task_id", StringType(), required=True, doc="hash of kind, repository, file and function"),
    NestedField(2, "kind", StringType(), required=True, doc="function-body (the first kind)"),
    NestedField(3, "split", StringType(), required=True, doc="train or heldout, from a hash of task_id"),
    NestedField(4, "repository", StringType(), required=True, doc="stdlib, or a package's name"),
    NestedField(5, "snapshot_table", StringType(), required=True, doc="the raw table holding the repository's files"),
    NestedField(6, "snapshot_id", LongType(), required=True, doc="its snapshot holding them"),
    NestedField(7, "doc_id", StringType(), required=True, doc="the file's document in that snapshot"),
    NestedField(8, "path", StringType(), required=True, doc="the file, from the repository folder's parent"),
    NestedField(9, "source_sha256", StringType(), required=True, doc="of the whole original file"),
    NestedField(10, "qualname", StringType(), required=True, doc="the function's qualified name"),
    NestedField(11, "first_line", LongType(), required=True, doc="its def (or first decorator) line"),
    NestedField(12, "body_start_line", LongType(), required=True, doc="first line a completion replaces"),
    NestedField(13, "body_end_line", LongType(), required=True, doc="last line a completion replaces"),
    NestedField(14, "indent", StringType(), required=True, doc="the body's indentation"),
    NestedField(15, "prompt", StringType(), required=True, doc="the file up to the signature and docstring"),
    NestedField(16, "original_body", StringType(), required=True, doc="the body as written; never shown to a learner"),
    NestedField(17, "single_return", BooleanType(), required=True, doc="the body is one line: return <expr>"),
    NestedField(18, "runner", StringType(), required=True, doc="pytest or unittest"),
    NestedField(19, "python", StringType(), required=True, doc="the interpreter the tests run with"),
    NestedField(20, "import_root", StringType(), required=True, doc="sys.path entry of the repository; rootdir"),
    NestedField(21, "repo_root", StringType(), required=True, doc="the repository folder (read-only in rollouts)"),
    NestedField(
        22, "tests", ListType(101, StringType(), element_required=True), required=True, doc="test ids that exercise it"
    ),
    NestedField(23, "tests_traced", LongType(), required=True, doc="passing tests that called it, before the cap"),
    NestedField(24, "original_reward", DoubleType(), required=True, doc="validation: the original body's reward (1)"),
    NestedField(25, "raise_reward", DoubleType(), required=True, doc="validation: a raising body's reward (0)"),
    NestedField(26, "empty_reward", DoubleType(), required=True, doc="validation: a `pass` body's reward (< 1)"),
)


@dataclass(frozen=True)
class Task:
    """One row of ``rl.tasks``. ``prompt`` is the learner's input; a completion is the function's
    body, indented as ``indent`` says, put back between the prompt and the rest of the file."""

    task_id: str
    kind: str
    split: str
    repository: str
    snapshot_table: str
    snapshot_id: int
    doc_id: str
    path: str
    source_sha256: str
    qualname: str
    first_line: int
    body_start_line: int
    body_end_line: int
    indent: str
    prompt: str
    original_body: str
    single_return: bool
    runner: str
    python: str
    import_root: str
    repo_root: str
    tests: tuple[str, ...]
    tests_traced: int
    original_reward: float
    raise_reward: float
    empty_reward: float

    @property
    def checkout(self) -> Checkout:
        return Checkout(self.python, self.import_root, self.repo_root, self.runner)

    @property
    def file(self) -> str:
        """The task's file on this machine."""
        return os.path.join(os.path.dirname(self.repo_root.rstrip("/")), self.path)

    def with_body(self, body: str) -> str:
        """The task's file with ``body`` in place of the function's. Raises InputError when the
        file on disk is no longer the one the task was built from."""
        with open(self.file, encoding="utf-8", newline="") as handle:
            text = handle.read()
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != self.source_sha256:
            raise InputError(
                f"{self.file} changed since task {self.task_id} was built from it: rebuild the environment "
                "(factory rl build) or restore the file"
            )
        return compose(split_lines(text), self.body_start_line, self.body_end_line, body)


def task_id(kind: str, repository: str, path: str, qualname: str, first_line: int, source_sha256: str) -> str:
    key = "\x00".join([kind, repository, path, qualname, str(first_line), source_sha256])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def split_of(task: str) -> str:
    """The held-out split: a hash of the id, so it never changes for a task and needs no state."""
    digest = hashlib.sha256(f"split\x00{task}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:4], "big") % 1000 < HELDOUT_PER_MILLE else "train"


def read_tasks(
    catalog: Catalog,
    table: str = TASKS_TABLE,
    *,
    snapshot_id: int | None = None,
    split: str | None = None,
    kind: str | None = None,
    single_return: bool | None = None,
    repositories: Sequence[str] = (),
) -> list[Task]:
    """The tasks of a snapshot of ``table`` (default: its current one), filtered, by task id."""
    if split is not None and split not in SPLITS:
        raise InputError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    source = load_table(catalog, parse_identifier(table))
    condition = AlwaysTrue()
    for column, value in (("split", split), ("kind", kind), ("single_return", single_return)):
        if value is not None:
            condition = And(condition, EqualTo(column, value))
    scan = source.scan(row_filter=condition, snapshot_id=snapshot_id)
    rows = scan.to_arrow().to_pylist() if source.current_snapshot() is not None else []
    wanted = set(repositories)
    tasks = [task_from_row(row) for row in rows if not wanted or row["repository"] in wanted]
    return sorted(tasks, key=lambda t: t.task_id)


def task_from_row(row: dict) -> Task:
    values = {f.name: row[f.name] for f in fields(Task)}
    values["tests"] = tuple(values["tests"])
    return Task(**values)


def tasks_arrow(rows: Sequence[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=schema)
