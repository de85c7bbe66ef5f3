"""The ``factory`` command line. Each command lives in its own module with two functions:
``add_arguments(parser, name)`` and ``run(args) -> int``. Only the invoked command's module is
imported, so ``factory tables`` does not pay for Spark or torch."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from lakehouse.errors import FactoryError

# name → (module, one-line help): a lazy registry, so only the invoked command's module (and what it
# needs) is imported. Each module has `add_arguments(parser, name)` and `run(args) -> int`.
# Order is the order `factory --help` lists them in.
COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("factory_cli.ingest", "raw records (JSONL, Parquet, source trees) into a document table"),
    "dedup": ("factory_cli.dedup", "exact and MinHash-LSH near-duplicate removal over pinned document tables"),
    "filter": ("factory_cli.filter", "quality-filter a document table, validate it and publish it"),
    "decontaminate": ("factory_cli.decontaminate", "remove documents sharing long n-grams with an eval set"),
    "tables": ("factory_cli.tables", "list tables with their current snapshot and size"),
    "snapshots": ("factory_cli.tables", "list a table's snapshots with how each was made"),
    "show": ("factory_cli.tables", "print the first rows of a table or pinned snapshot"),
    "tag": ("factory_cli.tables", "name a snapshot with a tag, or remove a tag (--delete)"),
    "tokenizer": ("factory_cli.tokenizer", "build a byte-level BPE tokenizer from pinned snapshots"),
    "mix": ("factory_cli.mix", "pin a mixture spec to snapshot ids and data files"),
    "train": ("factory_cli.train", "train a model on a pinned manifest through torchrun"),
    "eval": ("factory_cli.eval", "run eval suites on a checkpoint into evals.results and evals.samples"),
    "export": ("factory_cli.export", "write a checkpoint as a Hugging Face model folder (transformers, vLLM, SGLang)"),
    "sweep": ("factory_cli.sweep", "search training config keys and mixture weights, trials on Ray Tune"),
    "ablate": ("factory_cli.ablate", "run a base and one-change variants over seeds; differences against seed noise"),
    "rl": ("factory_cli.rl", "learning from code execution: `rl build` the environment, `rl train` a policy"),
    "lineage": ("factory_cli.lineage", "show which data, pipeline runs and raw inputs made a checkpoint"),
    "decisions": ("factory_cli.decisions", "list what the factory decided by itself (gates, mixtures, ablations), why"),
    "ui": (
        "factory_cli.ui",
        "serve the web UI: tables, documents, runs, lineage; eval samples, a playground, blind ratings",
    ),
    "gc": ("factory_cli.gc", "remove staged files of runs that never committed"),
    "compact": ("factory_cli.compact", "rewrite a table's small data files as fewer, in one replace snapshot"),
    "run": ("factory_cli.run", "materialise every asset of a factory definition once, in this process"),
    "demo": ("factory_cli.demo", "run the demo's factory definition on a corpus every machine has"),
}

# Commands that run Spark jobs → the module their Python tasks import. Their Spark session
# starts on a background thread while the command's own module is imported, and its Python
# workers import that module before the first task needs them (spark_session.start_spark_early).
# `factory rl build` is not here: it checks its options and finds its repositories first, in a
# fraction of a second, so that a refusal starts no JVM (factory_cli/rl_build.py starts Spark).
SPARK_COMMANDS: dict[str, str | None] = {
    "ingest": "pipelines.ingest_records",
    "dedup": "pipelines.dedup_stages",
    "filter": "quality.filter_task",
    "decontaminate": "quality.contamination",
    "demo": None,
}

# Spark jobs whose last act is a catalog commit: run as a program, they end right after it (``main``).
QUICK_EXIT_COMMANDS = {"ingest", "dedup", "filter", "decontaminate"}

EPILOG = """\
With no configuration the catalog is SQLite at $FACTORY_HOME/catalog.db (default ./.factory).
--catalog NAME or FACTORY_CATALOG=NAME uses a catalog from pyiceberg's configuration
(~/.pyiceberg.yaml or PYICEBERG_CATALOG__NAME__* variables).
References: NS.TABLE is the current snapshot of main; NS.TABLE@REF pins a snapshot id, tag or branch.
"""


def add_common_arguments(parser: argparse.ArgumentParser, module: object = None) -> None:
    """``--catalog`` and ``-q``. A command module that reads no catalog by name says why in
    ``NO_CATALOG``: its ``--catalog`` is then refused with that reason (exit 2), not ignored."""
    no_catalog = getattr(module, "NO_CATALOG", None)
    if no_catalog:
        parser.add_argument("--catalog", action=_Refused, reason=no_catalog, help=argparse.SUPPRESS)
        parser.set_defaults(catalog=None)
    else:
        parser.add_argument(
            "--catalog",
            metavar="NAME",
            default=None,
            help="pyiceberg catalog to use (default: $FACTORY_CATALOG, else the embedded SQLite catalog)",
        )
    parser.add_argument("-q", "--quiet", action="store_true", help="only print results and errors")


class _Refused(argparse.Action):
    """An option that does not apply to this command: the usage and ``reason``, exit 2."""

    def __init__(self, *args, reason: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reason = reason

    def __call__(
        self, parser: argparse.ArgumentParser, _namespace: object, _values: object, option_string=None
    ) -> None:
        parser.error(f"{option_string} does not apply to {parser.prog}: {self.reason}")


def build_parser(selected: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="factory",
        description="Model Factory: versioned pre-training data on Iceberg, streamed into training.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            imported = importlib.import_module(module)
            add_common_arguments(command, imported)
            imported.add_arguments(command, name)
    return parser


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("model-factory")
    except PackageNotFoundError:  # a checkout on PYTHONPATH, never installed
        return "(not installed)"


def run_command(name: str, argv: Sequence[str], prog: str | None = None) -> int:
    """Parse ``argv`` for one command and run it (also the spark-submit entry of each job)."""
    _start_spark_early(name, argv)
    parser = argparse.ArgumentParser(prog=prog or f"factory {name}", description=COMMANDS[name][1])
    module = importlib.import_module(COMMANDS[name][0])
    add_common_arguments(parser, module)
    module.add_arguments(parser, name)
    args = parser.parse_args(argv)
    args.command = name
    return _execute(module, args)


def _start_spark_early(name: str | None, argv: Sequence[str]) -> None:
    if name in SPARK_COMMANDS and "-h" not in argv and "--help" not in argv:
        from pipelines.spark_session import start_spark_early

        start_spark_early(f"factory-{name}", SPARK_COMMANDS[name])


def _execute(module, args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "pyiceberg", "urllib3", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        # py4j logs its failed sends to the root logger, at INFO with a traceback, when the JVM has
        # died: the command's own error says why it died.
        handler.addFilter(lambda record: not (record.name == "root" and "/py4j/" in record.pathname))
    from lakehouse.redact import redact

    try:
        return module.run(args)
    except FactoryError as exc:  # redacted: a message may repeat a URI as the user typed it
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a full disk, a read-only folder, Spark out of memory: said plainly
        from factory_cli.failures import explain

        explained = explain(exc, args)
        if explained is None:
            raise
        print(f"error: {redact(str(explained))}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    as_program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code, command = _main(argv)
        sys.stdout.flush()  # here, where a closed pipe is caught, not in the interpreter's teardown
    except BrokenPipeError:
        return _stdout_closed()
    if as_program and command in QUICK_EXIT_COMMANDS:
        _exit_now(code)
    return code


def _main(argv: list[str]) -> tuple[int, str]:
    selected = next((a for a in argv if not a.startswith("-")), None)
    _start_spark_early(selected, argv)
    parser = build_parser(selected if selected in COMMANDS else None)
    args = parser.parse_args(argv)
    return _execute(importlib.import_module(COMMANDS[args.command][0]), args), args.command


def _stdout_closed() -> int:
    """The reader of our output went away (``factory show t | head -1``): stop quietly, as CLIs
    do, with Python's documented recipe: stdout onto /dev/null, so that the interpreter's last
    flush of what is still buffered finds a stream that takes it, and exit status 1."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def _exit_now(code: int) -> None:
    """End the process without the interpreter's teardown.

    By now the job's commit is in the catalog, durable: what teardown would add is seconds of
    freeing pyarrow, pyiceberg and py4j objects and joining idle threads. The JVM notices its
    gateway's stdin close and runs its own shutdown hooks (temporary folders), as on any exit."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
