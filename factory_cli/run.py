"""``factory run FILE``: materialise every asset of a factory definition once, in this process.

The same Dagster graph `dagster dev -m orchestration.definitions` shows (docs/factory.md), run
here by Dagster's in-process executor: each asset's `factory` command is called in this process,
so the Spark jobs share one session. Every step is a no-op on inputs it has taken in before, so
running a definition again does only what is new.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence

from lakehouse.errors import ConfigError, FactoryError

DOCS = "docs/factory.md"


def add_arguments(parser: argparse.ArgumentParser, _name: str = "run") -> None:
    parser.description = (
        "Materialise every asset of a factory definition once, in this process: ingest and refine each source, "
        "gate, train the tokenizer, pin or search each mixture, train each run, evaluate, run the declared "
        "experiments. The same graph `dagster dev -m orchestration.definitions` shows."
    )
    parser.epilog = f"The definition's keys: {DOCS}#the-definition-key-by-key"
    parser.add_argument("definition", metavar="FILE", help="the factory definition (TOML), e.g. factory.toml")
    parser.add_argument(
        "--select", nargs="+", metavar="KEY", default=None,
        help="only these assets and what they need upstream, e.g. code/production mixture/main (default: all)",
    )  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the assets and exit")
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="also print Dagster's own log: each step's events, a failed step's stack trace",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from orchestration.definition_load import load_definition

    if args.catalog:
        use_catalog(args.catalog)
    definition = load_definition(args.definition)
    if args.list:
        from orchestration.graph import build_assets

        for asset in build_assets(definition):
            for key in asset.keys:
                print(f"{key.to_user_string():<32} {asset.descriptions_by_key.get(key, '').splitlines()[0]}")
        return 0
    materialise(definition, args.select, verbose=args.verbose, quiet=args.quiet)
    return 0


def use_catalog(name: str) -> None:
    """Every step of the run uses catalog ``name``: the steps, in this process and in those they
    start (torchrun, Ray's trials), find the catalog through FACTORY_CATALOG. Loaded once here, so a
    name that is not configured is refused before any step starts."""
    from lakehouse.catalog import load_catalog

    load_catalog(name)
    os.environ["FACTORY_CATALOG"] = name


def materialise(definition, select: Sequence[str] | None = None, *, verbose: bool = False, quiet: bool = False) -> None:
    """Every asset (or ``select`` and what it needs) once, in process; ``FactoryError`` naming the
    first step that failed and its error. Dagster's own log only when ``verbose``: a failed step's
    event carries its stack trace, and the error is said once, by the ``FactoryError``. A run that
    found nothing to do says so in one line, unless ``quiet``."""
    import dagster as dg

    from orchestration.graph import build_definitions
    from orchestration.sources import check_local_inputs

    runner = InProcessRunner()
    defs = build_definitions(definition, runner=runner)
    assets = list(defs.assets)
    selection = _selection(assets, select)
    check_local_inputs(definition, _ingested(definition, assets, selection))
    with _instance() as instance:
        result = dg.materialize(
            assets,
            instance=instance,
            resources=defs.resources,
            selection=selection,
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "INFO" if verbose else "CRITICAL"}}}},
        )
        if not verbose:  # the steps' own warnings (what a skipped step waits for), which Dagster's log would show
            for step, message in step_warnings(instance, result.run_id):
                print(f"warning: {step}: {message}", file=sys.stderr, flush=True)
    skipped = report(result)
    if not quiet:  # what the factory decided by itself in this run (the gate, mixtures, ablations)
        for line in decided(result.run_id):
            print(line, flush=True)
    # Each step works through a command, but the gate, which promotes what a refine command made:
    # none ran, so no step had anything new.
    if not (quiet or runner.ran or skipped):
        checked = len(result.get_asset_materialization_events())
        print(f"nothing new: {checked} asset(s) checked, all up to date", flush=True)


def _selection(assets: list, select: Sequence[str] | None):
    import dagster as dg

    if not select:
        return None
    known = {k.to_user_string() for a in assets for k in a.keys}
    unknown = sorted(set(select) - known)
    if unknown:
        raise ConfigError(f"--select: unknown asset(s) {', '.join(unknown)}; `factory run FILE --list` lists them")
    return dg.AssetSelection.assets(*[dg.AssetKey.from_user_string(s) for s in select]).upstream()


def step_warnings(instance, run_id: str) -> list[tuple[str, str]]:
    """(step, message) of each warning or error a step logged itself, not Dagster's events."""
    return [
        (entry.step_key or "run", entry.user_message)
        for entry in instance.all_logs(run_id)
        if entry.dagster_event is None and entry.level >= logging.WARNING
    ]


def decided(run_id: str) -> list[str]:
    """One line per decision the run recorded: its kind and subject, verdict and reason."""
    from pyiceberg.expressions import EqualTo

    from lakehouse.decisions import read_decisions
    from orchestration.state import catalog

    rows = read_decisions(catalog(), row_filter=EqualTo("orchestrator_run", run_id))
    return [f"decided: {r['kind']} {r['subject']}: {r['verdict']}: {r['reason']}" for r in rows]


def report(result) -> list[str]:
    """Print the steps left waiting and return them; a ``FactoryError`` naming the first step that
    failed and why."""
    skipped = [e.step_key for e in result.all_events if e.event_type_value == "STEP_SKIPPED"]
    if skipped:
        print(f"\nnot run, waiting for what they need (see the warnings above): {', '.join(skipped)}", flush=True)
    if not result.success:
        failures = result.get_step_failure_events()
        if not failures:
            failed = result.get_run_failure_event()
            cause = _cause(getattr(failed.event_specific_data, "error", None)) if failed else "failed"
            raise FactoryError(f"the factory's run failed before any step ran: {cause} (`factory run -v` shows more)")
        first = failures[0]
        if _interrupted(first.step_failure_data.error):  # Ctrl-C or SIGTERM: said as any command says it
            print(f"interrupted during step {first.step_key}: run the same command again to finish", file=sys.stderr)
            raise KeyboardInterrupt
        raise FactoryError(f"step {first.step_key} failed: {_cause(first.step_failure_data.error)}")
    return skipped


def _ingested(definition, assets: list, selection) -> list[str]:
    """The sources whose raw asset this run materialises (all, or those ``selection`` reaches)."""
    from orchestration.keys import step_key

    chosen = None if selection is None else selection.resolve(assets)
    return [name for name in definition.sources if chosen is None or step_key(name, "raw") in chosen]


def _interrupted(error) -> bool:
    while error is not None:
        if error.cls_name in ("DagsterExecutionInterruptedError", "KeyboardInterrupt"):
            return True
        error = error.cause
    return False


def _cause(error) -> str:
    """The step's own error, its first line: Dagster wraps it in errors of its own (``Dagster…``),
    and the class of one of ours (``lakehouse.errors.InputError``, ``dagster.Failure`` whose message
    is the command's ``error:`` line) says nothing the message does not; another's (a bug's
    ``KeyError``) is kept."""
    if error is None:
        return "failed"
    while error.cause is not None and error.cls_name.startswith("Dagster"):
        error = error.cause
    line = error.message.strip().splitlines()[0] if error.message.strip() else error.cls_name
    qualified, colon, message = line.partition(": ")
    return message if colon and _ours(qualified) else line


def _ours(qualified: str) -> bool:
    """``qualified`` names a FactoryError or Dagster's Failure. The class was raised in this process,
    so its module is loaded: nothing is imported to tell."""
    import dagster as dg

    module, _, name = qualified.rpartition(".")
    found = getattr(sys.modules.get(module), name, None)
    return isinstance(found, type) and issubclass(found, FactoryError | dg.Failure)


@contextlib.contextmanager
def _instance():
    """Dagster's instance under ``$DAGSTER_HOME`` when it is set (runs then show in its UI), else a
    throwaway one."""
    import os

    import dagster as dg

    if home := os.environ.get("DAGSTER_HOME"):
        if not os.path.isdir(home):  # Dagster's own refusal is a traceback
            raise ConfigError(f"DAGSTER_HOME={home} is not a folder: create it (mkdir -p {home}) or unset DAGSTER_HOME")
        with dg.DagsterInstance.get() as instance:
            yield instance
    else:
        with dg.DagsterInstance.ephemeral() as instance:
            yield instance


class InProcessRunner:
    """Runs a `factory` command in this process (``main.run_command``), its output shown as it is
    printed and kept for Dagster's log and error message; ``ran`` counts the commands."""

    def __init__(self) -> None:
        self.ran = 0

    def __call__(self, argv: Sequence[str], log: Callable[[str], None]) -> tuple[int, str]:
        from factory_cli.main import run_command

        self.ran += 1
        print(f"\n· factory {' '.join(argv)}", flush=True)
        started = time.monotonic()
        kept = io.StringIO()
        with contextlib.redirect_stdout(_Tee(sys.stdout, kept)), contextlib.redirect_stderr(_Tee(sys.stderr, kept)):
            try:
                code = run_command(argv[0], list(argv[1:]))
            except SystemExit as exc:  # argparse refused the arguments
                code = exc.code if isinstance(exc.code, int) else 2
        print(f"(factory {argv[0]}: {time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
        return code, kept.getvalue()


class _Tee(io.TextIOBase):
    def __init__(self, *streams) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()
