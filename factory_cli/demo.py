"""``factory demo``: the demo's factory definition (``configs/demo-factory.toml``), run through the
same graph as any factory (``factory run``), on a corpus every machine with this project has.

The corpus: the Python standard library's ``.py`` files (source ``code``); licence texts and
package documentation found on the system (source ``text``), or, where the system has none, the
licence files of the installed Python packages. This command links them under
``$FACTORY_HOME/demo/corpus/``, where the definition's sources point, then runs the definition:
ingest, dedup, filter, decontaminate, the refinement gate, a tokenizer, a two-component mixture,
a tiny model trained on 2 CPU ranks, its last checkpoint evaluated. Then it prints the tables,
the factory's decisions, and the checkpoint's lineage with its eval results.

Every step is a no-op on inputs it has taken in, so running the demo again does nothing new.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import sysconfig
from pathlib import Path

from lakehouse.catalog import factory_home, load_catalog

DEFINITION = Path(__file__).resolve().parent.parent / "configs" / "demo-factory.toml"
SYSTEM_TEXT = {"licenses": Path("/usr/share/common-licenses"), "docs": Path("/usr/share/doc")}


def add_arguments(parser: argparse.ArgumentParser, _name: str = "demo") -> None:
    parser.description = __doc__.split("\n\n")[0]


def run(args: argparse.Namespace) -> int:
    from factory_cli.run import materialise
    from factory_cli.tables import format_tables
    from orchestration.definition_load import load_definition

    catalog = load_catalog(args.catalog)
    print(f"lakehouse: {factory_home()} (catalog {catalog.name})")
    corpus = build_corpus(factory_home() / "demo" / "corpus")
    for name, target in corpus.items():
        print(f"  corpus {name}: {target}")
    definition = load_definition(DEFINITION)
    materialise(definition)
    print()
    print(format_tables(catalog))
    _show(["decisions", "--factory", definition.name], args.catalog)
    run_dir = definition.folder() / "runs" / "demo"
    current = run_dir / "current.json"
    if current.is_file():
        import json

        _show(["lineage", json.loads(current.read_text())["run_dir"]], args.catalog)
    return 0


def build_corpus(folder: Path) -> dict[str, Path]:
    """Link the demo's inputs under ``folder`` (``code``, ``licenses``, ``docs``); each link's target.

    Ingest resolves a link to the folder it names and takes relative paths from that folder's
    parent, so documents keep the ids and paths they have when the folder is named directly."""
    folder.mkdir(parents=True, exist_ok=True)
    targets = {"code": Path(sysconfig.get_paths()["stdlib"])}
    found = {name: path for name, path in SYSTEM_TEXT.items() if path.is_dir()}
    fallback = None if len(found) == len(SYSTEM_TEXT) else _package_licences(folder / "package-licenses")
    targets.update({name: found.get(name, fallback) for name in SYSTEM_TEXT})
    for name, target in targets.items():
        link = folder / name
        if link.is_symlink() and link.resolve() == target.resolve():
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)
    return targets


def _package_licences(folder: Path) -> Path:
    """No system documentation (a slim container): the installed packages' licence files, copied."""
    site = Path(sysconfig.get_paths()["purelib"])
    folder.mkdir(parents=True, exist_ok=True)
    for pattern in ("LICENSE*", "COPYING*", "NOTICE*"):
        for path in site.glob(f"*/{pattern}"):
            if path.is_file():
                shutil.copyfile(path, folder / f"{path.parent.name}-{path.name}")
    return folder


def _show(argv: list[str], catalog_name: str | None) -> None:
    from factory_cli.main import run_command

    print(f"\n· factory {' '.join(argv)}", flush=True)
    sys.stdout.flush()
    run_command(argv[0], [*argv[1:], *(["--catalog", catalog_name] if catalog_name else [])])
