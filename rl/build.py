"""The environment builder: real repositories into validated tasks in ``rl.tasks`` (docs/rl.md).

    factory rl build --repository stdlib --repository joblib --max-test-modules 10
    spark-submit pipelines/rl_tasks.py build --max-test-modules 10

1. Each repository's Python files are ingested into a raw table (``raw.rl_repositories``) by the
   ingest job's own code, under a source named by the repository and a digest of its files, with
   a run id made of both: the same tree is ingested once, and a task's ``doc_id`` in that
   snapshot is its file.
2. Trace (one Spark task per test module): the module's tests run once in the sandbox, each in
   its own process, recording which of the repository's functions each calls. Those that pass
   alone are kept.
3. Candidates (driver): every function of the repository's own source that a passing test called
   becomes a ``function-body`` task (``rl/functions.py``) with those tests, up to the limits.
4. Validate (one Spark task per candidate): the original body must pass all the task's tests; the
   tests that still pass with a body that only raises are dropped from the task (they do not
   depend on it), and the task with them if none is left; a task whose tests all pass with an
   empty body (``pass``) is dropped too (a do-nothing completion would earn full reward). Each
   drop is counted by reason in the snapshot's stats.
5. The tasks, sorted by id, replace the table's content through the commit protocol and
   write-audit-publish: one snapshot per build, the whole environment.

The same trees and options give the same tasks and task ids whatever the parallelism.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from evals.sandbox import Limits, claimed_uid
from lakehouse.catalog import ensure_table
from lakehouse.columns import TARGET_COLUMN
from lakehouse.commit import CommitResult, Run, StagedFile, existing_commits
from lakehouse.errors import InputError
from lakehouse.publish import check_branch_free, publish, remove_branch, start_branch
from lakehouse.refs import parse_identifier
from lakehouse.run_binding import RunOutput, commit_run, find_run_commits
from lakehouse.schemas import file_schema
from pipelines.ingest import IngestOptions, ingest
from pipelines.ingest_inputs import discover
from pipelines.ingest_records import RecordConfig, doc_id_for
from pipelines.ship_code import TASK_PACKAGES, ship_code
from pipelines.staging import Target, staged_outputs, write_partition
from rl.functions import KIND, FunctionBody, find_functions
from rl.repositories import Repository, find_repositories
from rl.rollouts import rollout
from rl.sandbox import ROLLOUT_LIMITS, require_bwrap, run_harness
from rl.tasks import TASKS_SCHEMA, TASKS_TABLE, Task, split_of, task_id

log = logging.getLogger("factory.rl")

SNAPSHOTS_TABLE = "raw.rl_repositories"
ROWS_PER_FILE = 2000
DROP_REASONS = ("original-fails", "raise-body-passes", "empty-body-passes")


@dataclass(frozen=True)
class BuildOptions:
    output: str = TASKS_TABLE
    snapshots: str = SNAPSHOTS_TABLE  # the raw table the repositories' files are ingested into
    python: str = sys.executable  # the interpreter whose standard library and packages are built from
    repositories: Sequence[str] = ()  # names (stdlib, a package's); none: all, unless paths are given
    paths: Sequence[str] = ()  # package folders built from as well
    include_tests: Sequence[str] = ()  # globs on test modules (paths from the import root, or module names)
    max_test_modules: int = 20  # per repository, chosen by a hash of their names
    max_tests_per_module: int = 50  # traced, chosen by a hash of their ids
    max_functions: int = 200  # tasks validated per repository, chosen by a hash of their ids
    max_tests_per_task: int = 8
    test_timeout: float = 20.0  # seconds, per test
    parallelism: int | None = None  # Spark partitions per stage (default: one per test module / candidate)
    run_id: str | None = None

    def check(self) -> None:
        for name in ("max_test_modules", "max_tests_per_module", "max_functions", "max_tests_per_task"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not (math.isfinite(self.test_timeout) and self.test_timeout > 0):
            raise InputError(f"--test-timeout must be a positive number of seconds, got {self.test_timeout}")
        if self.parallelism is not None and self.parallelism < 1:
            raise InputError(f"--parallelism must be at least 1, got {self.parallelism}")
        parse_identifier(self.output)
        parse_identifier(self.snapshots)

    def params(self, repos: Sequence[Repository]) -> dict[str, object]:
        return {
            "output": self.output,
            "snapshots": self.snapshots,
            "python": self.python,
            "repositories": [r.name for r in repos],
            "test-modules": {r.name: list(r.test_modules) for r in repos},
            "max-tests-per-module": self.max_tests_per_module,
            "max-functions": self.max_functions,
            "max-tests-per-task": self.max_tests_per_task,
            "test-timeout": self.test_timeout,
        }


@dataclass
class BuildResult:
    run_id: str
    tasks: CommitResult
    stats: dict[str, int] = field(default_factory=dict)
    already_committed: bool = False

    @property
    def throughput(self) -> float:
        """Tasks validated per second per core."""
        seconds = self.stats.get("validation-ms", 0) / 1000
        cores = self.stats.get("cores", 1)
        return self.stats.get("candidates", 0) / (seconds * cores) if seconds else 0.0


@dataclass(frozen=True)
class _Snapshot:
    table: str
    snapshot_id: int
    source: str  # the ingest's source name: the repository's name and a digest of its files


@dataclass(frozen=True)
class _Traced:
    """What tracing one test module found (paths are tasks' paths)."""

    repository: str
    module: str
    status: str
    passed: dict[str, list[tuple[str, int, str]]]  # passing test -> functions it called
    failed: int
    runtime_files: tuple[str, ...]  # files the harness or runner ran before the tests (never tasks)


def build(
    spark: SparkSession, catalog: Catalog, opts: BuildOptions, repos: Sequence[Repository] | None = None
) -> BuildResult:
    """Build the environment and publish it as the content of ``opts.output``. ``repos``: those
    ``find_repositories(opts)`` gives, if the caller has them already."""
    opts.check()
    require_bwrap()  # here, not first in a Spark task after every repository is ingested
    repos = find_repositories_of(opts) if repos is None else repos
    ship_code(spark, (*TASK_PACKAGES, "evals", "rl"))
    snapshots = {repo.name: _snapshot(spark, catalog, repo, opts.snapshots) for repo in repos}
    out_id = parse_identifier(opts.output)
    inputs = [
        {"table": s.table, "snapshot_id": s.snapshot_id, "repository": name, "source": s.source}
        for name, s in sorted(snapshots.items())
    ]
    run = Run("rl-build", opts.run_id or Run.new_id("rl-build"), opts.params(repos), inputs)
    branch = f"audit-{run.run_id}"
    audited = find_run_commits(catalog, run, [out_id], branch=branch)[out_id]
    done = find_run_commits(catalog, run, [out_id])
    if done[out_id] is not None:
        log.info("run %s is already committed to %s; nothing to do", run.run_id, opts.output)
        remove_branch(catalog, out_id, branch)
        (commit,), stats = existing_commits(done)
        return BuildResult(run.run_id, commit, stats, already_committed=True)
    table = ensure_table(catalog, out_id, TASKS_SCHEMA)
    if audited is None:
        check_branch_free(table, branch, opts.output)  # before tracing, the build's long part
        tasks, stats = _tasks(spark, repos, snapshots, opts)
        files = _stage(table, run, tasks)
        start_branch(catalog, out_id, branch, empty=True)
        (commit,) = commit_run(catalog, run, [RunOutput(out_id, files, branch)], stats)
    else:  # committed to the audit branch, main not yet moved: publish what was committed
        (commit,), stats = existing_commits({out_id: audited})
    publish(catalog, out_id, commit.snapshot_id)
    remove_branch(catalog, out_id, branch)
    return BuildResult(run.run_id, commit, stats)


def find_repositories_of(opts: BuildOptions) -> list[Repository]:
    return find_repositories(opts.python, opts.repositories, opts.paths, opts.include_tests, opts.max_test_modules)


def _snapshot(spark: SparkSession, catalog: Catalog, repo: Repository, table: str) -> _Snapshot:
    """The repository's Python files in ``table``, by the ingest job (once per content)."""
    exclude = list(repo.exclude)
    files = discover([repo.checkout.repo_root], "files", ["*.py"], exclude)
    digest = hashlib.sha256()
    for f in files:
        with open(f.uri.removeprefix("file://"), "rb") as handle:
            digest.update(f"{f.relpath}\x00{hashlib.sha256(handle.read()).hexdigest()}\n".encode())
    tag = digest.hexdigest()[:12]
    source = f"{repo.name}-{tag}"
    options = IngestOptions(
        inputs=[repo.checkout.repo_root],
        fmt="files",
        output=table,
        records=RecordConfig(source=source),
        include=["*.py"],
        exclude=exclude,
        run_id=f"rl-snapshot-{source}",
    )
    result = ingest(spark, catalog, options)
    assert result.documents is not None
    log.info("%s: %d files in %s@%s", repo.name, len(files), table, result.documents.snapshot_id)
    return _Snapshot(table, result.documents.snapshot_id, source)


def _tasks(
    spark: SparkSession, repos: Sequence[Repository], snapshots: dict[str, _Snapshot], opts: BuildOptions
) -> tuple[list[Task], dict[str, int]]:
    context = spark.sparkContext
    cores = context.defaultParallelism
    units = [(repo, module) for repo in repos for module in repo.test_modules]
    started = time.monotonic()
    slices = min(len(units), opts.parallelism or len(units))
    traced = context.parallelize(units, slices).map(lambda unit: _trace(unit[0], unit[1], opts)).collect()
    trace_s = time.monotonic() - started
    candidates, stats = _candidates(repos, traced, snapshots, opts)
    log.info("traced %d test modules in %.0fs: %d candidate tasks", len(units), trace_s, len(candidates))
    started = time.monotonic()
    validated = []
    if candidates:
        slices = min(len(candidates), opts.parallelism or len(candidates))
        validated = context.parallelize(candidates, slices).map(lambda task: _validate(task, opts)).collect()
    validation_s = time.monotonic() - started
    kept = sorted((task for task, _, _ in validated if task is not None), key=lambda t: t.task_id)
    drops = Counter(reason for _, reason, _ in validated if reason is not None)
    stats.update(
        {
            "candidates": len(candidates),
            "tasks": len(kept),
            **{f"dropped.{reason}": drops.get(reason, 0) for reason in DROP_REASONS},
            "tests-insensitive": sum(n for _, _, n in validated),
            "single-return": sum(t.single_return for t in kept),
            "heldout": sum(t.split == "heldout" for t in kept),
            "trace-ms": round(trace_s * 1000),
            "validation-ms": round(validation_s * 1000),
            "cores": cores,
        }
    )
    log.info("validated %d candidates in %.0fs on %d cores: %d tasks", len(candidates), validation_s, cores, len(kept))
    return kept, stats


def _trace(repo: Repository, module: str, opts: BuildOptions) -> _Traced:
    """Run one test module's tests in the sandbox, recording what each calls (a Spark task)."""
    with claimed_uid() as uid:
        run = run_harness(
            repo.checkout,
            mode="trace",
            modules=[module],
            max_tests=opts.max_tests_per_module,
            limits=_limits(opts),
            test_timeout=opts.test_timeout,
            uid=uid,
        )
    runtime = set()
    passed, failed = {}, 0
    for record in run.records:
        runtime.update(record.get("runtime_files", ()))
        if "test" not in record:
            continue
        if record.get("verdict") != "passed":
            failed += 1
            continue
        calls = []
        for filename, line, qualname in record.get("calls", ()):
            path = repo.relpath(filename)
            if path is not None and not qualname.rsplit(".", 1)[-1].startswith("<"):
                calls.append((path, int(line), qualname))
        passed[record["test"]] = sorted(calls)
    paths = tuple(sorted(p for p in map(repo.relpath, runtime) if p is not None))
    status = "runner-error" if run.status == "ok" and any("error" in r for r in run.records) else run.status
    if status != "ok":
        log.warning("%s %s: %s; %s", repo.name, module, status, run.output[-500:])
    return _Traced(repo.name, module, status, passed, failed, paths)


def _limits(opts: BuildOptions) -> Limits:
    return replace(ROLLOUT_LIMITS, cpu_s=max(ROLLOUT_LIMITS.cpu_s, int(opts.test_timeout * 10)))


def _candidates(
    repos: Sequence[Repository], traced: Sequence[_Traced], snapshots: dict[str, _Snapshot], opts: BuildOptions
) -> tuple[list[Task], dict[str, int]]:
    """A task for each function of a repository's own source that its passing tests called."""
    by_name = {r.name: r for r in repos}
    tests_of: dict[tuple[str, str, int, str], set[str]] = defaultdict(set)
    runtime: dict[str, set[str]] = defaultdict(set)
    elsewhere: set[tuple[str, str, int, str]] = set()  # called only by tests of another module
    for unit in traced:
        repo = by_name[unit.repository]
        runtime[unit.repository].update(unit.runtime_files)
        for test, calls in unit.passed.items():
            for path, line, qualname in calls:
                key = (unit.repository, path, line, qualname)
                if repo.tests_path(unit.module, path):
                    tests_of[key].add(test)
                else:
                    elsewhere.add(key)
    elsewhere -= tests_of.keys()
    skipped: Counter[str] = Counter({"not-the-subject": len(elsewhere)} if elsewhere else {})
    made: dict[str, list[Task]] = defaultdict(list)
    sources: dict[tuple[str, str], tuple[str, dict] | None] = {}
    keys = sorted(tests_of, key=lambda k: hashlib.sha256(repr(k).encode()).hexdigest())
    for key in keys:
        name, path, line, qualname = key
        repo = by_name[name]
        if path in runtime[name]:
            skipped["runner-module"] += 1
            continue
        if len(made[name]) >= opts.max_functions:
            skipped["over-limit"] += 1
            continue
        if (name, path) not in sources:
            sources[(name, path)] = _functions_of(os.path.join(repo.files_base, path))
        parsed = sources[(name, path)]
        if parsed is None:
            skipped["unparsable"] += 1
            continue
        text_sha, functions = parsed
        function = functions.get((qualname, line), "not-found")
        if isinstance(function, str):
            skipped[function] += 1
            continue
        tests = sorted(tests_of[key], key=lambda t: hashlib.sha256(t.encode()).hexdigest())
        made[name].append(_task(repo, snapshots[name], path, text_sha, function, tests, opts))
    stats = {
        "repositories": len(repos),
        "test-modules": len(traced),
        **{f"test-modules.{status}": n for status, n in sorted(Counter(u.status for u in traced).items())},
        "tests-passed": sum(len(u.passed) for u in traced),
        "tests-failed": sum(u.failed for u in traced),
        "functions-exercised": len(tests_of) + len(elsewhere),
        **{f"skipped.{reason}": n for reason, n in sorted(skipped.items())},
    }
    candidates = sorted((t for tasks in made.values() for t in tasks), key=lambda t: t.task_id)
    return candidates, stats


def _functions_of(file: str) -> tuple[str, dict] | None:
    try:
        with open(file, encoding="utf-8", newline="") as handle:
            text = handle.read()
        return hashlib.sha256(text.encode("utf-8")).hexdigest(), find_functions(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None


def _task(
    repo: Repository,
    snapshot: _Snapshot,
    path: str,
    text_sha: str,
    function: FunctionBody,
    tests: Sequence[str],
    opts: BuildOptions,
) -> Task:
    identifier = task_id(KIND, repo.name, path, function.qualname, function.first_line, text_sha)
    return Task(
        task_id=identifier,
        kind=KIND,
        split=split_of(identifier),
        repository=repo.name,
        snapshot_table=snapshot.table,
        snapshot_id=snapshot.snapshot_id,
        doc_id=doc_id_for(snapshot.source, path),
        path=path,
        source_sha256=text_sha,
        qualname=function.qualname,
        first_line=function.first_line,
        body_start_line=function.body_start_line,
        body_end_line=function.body_end_line,
        indent=function.indent,
        prompt=function.prompt,
        original_body=function.body,
        single_return=function.single_return,
        runner=repo.checkout.runner,
        python=repo.checkout.python,
        import_root=repo.checkout.import_root,
        repo_root=repo.checkout.repo_root,
        tests=tuple(sorted(tests[: opts.max_tests_per_task])),
        tests_traced=len(tests),
        original_reward=0.0,
        raise_reward=0.0,
        empty_reward=0.0,
    )


def _validate(task: Task, opts: BuildOptions) -> tuple[Task | None, str | None, int]:
    """The task as validated (or None and why it is dropped), and how many of its tests did not
    depend on the function (a Spark task)."""
    limits = _limits(opts)
    with claimed_uid() as uid:

        def reward(candidate: Task, body: str):
            return rollout(candidate, body, uid=uid, limits=limits, test_timeout=opts.test_timeout)

        if reward(task, task.original_body).reward < 1:
            return None, "original-fails", 0
        raised = reward(task, f"{task.indent}raise NotImplementedError\n")
        sensitive = tuple(t for t in task.tests if raised.verdicts[t] != "passed")
        if not sensitive:
            return None, "raise-body-passes", 0
        narrowed = replace(task, tests=sensitive)
        empty = reward(narrowed, f"{task.indent}pass\n").reward
        if empty >= 1:
            return None, "empty-body-passes", 0
    return (
        replace(narrowed, original_reward=1.0, raise_reward=0.0, empty_reward=empty),
        None,
        len(task.tests) - len(sensitive),
    )


def _stage(table, run: Run, tasks: Sequence[Task]) -> list[StagedFile]:
    """Write the tasks, in id order, ROWS_PER_FILE to a file, under the run's staging prefix."""
    schema = file_schema(table, TASKS_SCHEMA)
    target = Target.for_table(table, run.staging_prefix(table), schema)
    reports = []
    for part in range(math.ceil(len(tasks) / ROWS_PER_FILE)):
        chunk = tasks[part * ROWS_PER_FILE : (part + 1) * ROWS_PER_FILE]
        rows = [{**asdict(t), "tests": list(t.tests), TARGET_COLUMN: "tasks"} for t in chunk]
        arrow = pa.Table.from_pylist(rows, schema=schema.append(pa.field(TARGET_COLUMN, pa.string())))
        reports += list(write_partition(iter(arrow.to_batches()), {"tasks": target}, part=part))
    rows = [row for batch in reports for row in batch.to_pylist()]
    return staged_outputs([_Row(**row) for row in rows], {"tasks": target})["tasks"].files


@dataclass(frozen=True)
class _Row:
    """A staging report row (as Spark's Row, which ``staged_outputs`` reads by attribute)."""

    target: str
    path: str
    records: int
    counts: str
    bytes: int
