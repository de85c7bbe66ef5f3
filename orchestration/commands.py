"""Running a `factory` command for Dagster: the command is the unit of work, Dagster decides when.

Each command gets ``--run-id`` from Dagster's run: the root run's id (the first run of a chain of
re-executions) and the step. A Dagster retry of a failed run (a re-execution, a new Dagster run
with the same root) therefore hands the job the same run id, and the run-id binding
(docs/architecture.md, "The commit protocol", step 4) makes it finish what the failed attempt
left, or refuse if the inputs moved; it never commits twice.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence

import dagster as dg

from lakehouse.catalog import load_catalog, resolve
from orchestration.settings import FactorySettings


def factory_run_id(context: dg.OpExecutionContext | dg.AssetExecutionContext, step: str) -> str:
    """``<root Dagster run id>-<step>``: the same across Dagster's re-executions of a run."""
    run = context.run
    return f"{run.root_run_id or run.run_id}-{step}"


def run_factory(context, settings: FactorySettings, argv: Sequence[str]) -> str:
    """Run ``factory ARGV``; return what it printed. A non-zero exit fails the Dagster step with
    the command's own error message."""
    argv = list(argv)  # the catalog reaches the command as FACTORY_CATALOG (settings.environment)
    context.log.info("factory %s", " ".join(argv))
    if settings.in_process:
        code, output = _in_process(settings, argv)
    else:
        proc = subprocess.run(
            [sys.executable, "-m", "factory_cli.main", *argv],
            env=settings.environment(),
            capture_output=True,
            text=True,
        )
        code, output = proc.returncode, proc.stdout + proc.stderr
    for line in output.splitlines()[-60:]:
        context.log.info(line)
    if code != 0:
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        raise dg.Failure(
            description=f"factory {argv[0]} exited with {code}: {errors[-1] if errors else output[-2000:]}",
            metadata={"command": "factory " + " ".join(argv)},
        )
    return output


def _in_process(settings: FactorySettings, argv: list[str]) -> tuple[int, str]:
    import io
    from contextlib import redirect_stdout

    from factory_cli.main import run_command

    out = io.StringIO()
    with _environment(settings), redirect_stdout(out):
        try:
            code = run_command(argv[0], argv[1:])
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    return code, out.getvalue()


@contextlib.contextmanager
def _environment(settings: FactorySettings) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("FACTORY_HOME", "FACTORY_CATALOG")}
    if settings.home:
        os.environ["FACTORY_HOME"] = settings.home
    if settings.catalog:
        os.environ["FACTORY_CATALOG"] = settings.catalog
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def pinned(settings: FactorySettings, table: str) -> str:
    """``NS.TABLE@<snapshot id>`` of the table's main now: each step reads a pinned snapshot."""
    with _environment(settings):
        return str(resolve(load_catalog(settings.catalog or None), table)[1])


def snapshot_id(settings: FactorySettings, table: str) -> int | None:
    """The current snapshot of ``table``'s main, or None if it has none (or does not exist)."""
    from lakehouse.errors import FactoryError

    try:
        return int(pinned(settings, table).rsplit("@", 1)[1])
    except FactoryError:
        return None


def recorded_inputs(settings: FactorySettings, table: str, run_id: str) -> list[dict] | None:
    """The pinned inputs (``factory.inputs``) run ``run_id`` committed to ``table``'s main, if it did."""
    import json

    from lakehouse.commit import find_run_snapshot
    from lakehouse.errors import FactoryError

    with _environment(settings):
        try:
            found = find_run_snapshot(resolve(load_catalog(settings.catalog or None), table)[0], run_id)
        except FactoryError:
            return None
    return None if found is None else json.loads(found.summary["factory.inputs"])
