"""``factory rl build``: the RL environment from this machine's repositories into ``rl.tasks`` (docs/rl.md)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from factory_cli.arguments import add_run_id_argument

if TYPE_CHECKING:
    from rl.build import BuildResult


def add_arguments(build: argparse.ArgumentParser) -> None:
    build.description = (
        "Find the repositories of an interpreter (its standard library with its test suite, and the installed "
        "packages that ship tests), snapshot their files into a raw table, run their tests in the sandbox tracing "
        "which functions each calls, make a task of each exercised function (its body removed), validate every task "
        "(the original body passes, a raising or empty body does not) and publish them as rl.tasks."
    )
    build.epilog = "The tasks, the options and the figures: docs/rl.md#factory-rl-build"
    build.add_argument(
        "--repository", action="append", default=[], metavar="NAME",
        help="build from this repository only (stdlib, or a package name, e.g. joblib); repeat for more "
        "(default: all the interpreter has, unless --path is given)",
    )  # fmt: skip
    build.add_argument(
        "--path", action="append", default=[], metavar="FOLDER",
        help="a package folder with tests to build from as well (its parent is the import root)",
    )  # fmt: skip
    build.add_argument(
        "--python", default=sys.executable, metavar="PYTHON",
        help="the interpreter whose standard library and packages are the repositories, and which runs their "
        "tests (default: this one)",
    )  # fmt: skip
    build.add_argument(
        "--tests", action="append", default=[], metavar="GLOB",
        help="only test modules matching (a path from the import root, e.g. 'joblib/test/test_hashing.py', or a "
        "module name, e.g. 'test.test_textwrap'); repeat for more",
    )  # fmt: skip
    build.add_argument("--max-test-modules", type=int, default=20, metavar="N", help="per repository (default 20)")
    build.add_argument("--max-tests-per-module", type=int, default=50, metavar="N", help="traced (default 50)")
    build.add_argument("--max-functions", type=int, default=200, metavar="N", help="tasks per repository (default 200)")
    build.add_argument("--max-tests-per-task", type=int, default=8, metavar="N", help="(default 8)")
    build.add_argument("--test-timeout", type=float, default=20.0, metavar="S", help="seconds per test (default 20)")
    build.add_argument(
        "--parallelism", type=int, metavar="N", help="Spark partitions per stage (default: one per unit)"
    )
    build.add_argument("--output", default="rl.tasks", metavar="NS.TABLE", help="the task table (default rl.tasks)")
    build.add_argument(
        "--snapshots", default="raw.rl_repositories", metavar="NS.TABLE",
        help="the raw table the repositories' files are ingested into (default raw.rl_repositories)",
    )  # fmt: skip
    add_run_id_argument(build)
    # Also accepted after the subcommand; SUPPRESS keeps a value given before it.
    build.add_argument("--catalog", metavar="NAME", default=argparse.SUPPRESS, help="pyiceberg catalog to use")
    build.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only print results and errors"
    )


def run(args: argparse.Namespace) -> int:
    from lakehouse.catalog import load_catalog
    from pipelines.spark_session import get_spark, start_spark_early
    from rl.build import BuildOptions, build, find_repositories_of

    opts = BuildOptions(
        output=args.output,
        snapshots=args.snapshots,
        python=args.python,
        repositories=tuple(args.repository),
        paths=tuple(args.path),
        include_tests=tuple(args.tests),
        max_test_modules=args.max_test_modules,
        max_tests_per_module=args.max_tests_per_module,
        max_functions=args.max_functions,
        max_tests_per_task=args.max_tests_per_task,
        test_timeout=args.test_timeout,
        parallelism=args.parallelism,
        run_id=args.run_id,
    )
    opts.check()  # a bad option or repository is refused here, before Spark starts
    repos = find_repositories_of(opts)
    # Only now: a refused command exits in a second, with no JVM started and no Spark noise.
    start_spark_early("factory-rl-build", "rl.build")
    result = build(get_spark("factory-rl-build"), load_catalog(args.catalog), opts, repos)
    print(format_result(result))
    return 0


def format_result(result: BuildResult) -> str:
    s = result.stats
    state = "already committed: nothing done" if result.already_committed else "committed"
    lines = [
        f"run {result.run_id} ({state})",
        f"  {result.tasks.table}@{result.tasks.snapshot_id}: {s.get('tasks', 0)} tasks "
        f"({s.get('heldout', 0)} held out, {s.get('single-return', 0)} single-return) from "
        f"{s.get('repositories', 0)} repositories, {s.get('test-modules', 0)} test modules",
        f"  tests: {s.get('tests-passed', 0)} passed alone, {s.get('tests-failed', 0)} did not",
        f"  candidates: {s.get('candidates', 0)} of {s.get('functions-exercised', 0)} exercised functions; "
        + ", ".join(f"{k}={v}" for k, v in sorted(s.items()) if k.startswith(("dropped.", "skipped."))),
    ]
    if s.get("validation-ms"):
        lines.append(
            f"  validation: {s.get('validation-ms', 0) / 1000:.1f}s on {s.get('cores', 1)} cores, "
            f"{result.throughput:.3f} tasks/s/core"
        )
    return "\n".join(lines)
