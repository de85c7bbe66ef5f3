"""The user's path to a table, which the benchmarks take to build their inputs: this machine's Python
standard library written as JSON lines, then the factory's own commands (``factory ingest``,
``factory filter``, ``factory tokenizer train``, ``factory mix pin``) with their default options,
each in a fresh process as a user types it. No benchmark chooses a table's layout: what the jobs
write is what is measured (issue 34)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def stdlib_texts() -> list[tuple[str, str]]:
    """Every ``.py`` file of the standard library as (path, text), in path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        try:
            found.append((str(path.relative_to(root)), path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return found


def write_jsonl(path: Path, records: list[dict]) -> int:
    """``records`` as one JSON line each; the file's bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
    return path.stat().st_size


def write_stdlib_corpus(folder: Path, copies: int | None = None, megabytes: float | None = None) -> int:
    """The library as JSON lines ``{"text", "path"}``, a file per copy (``copyN/stdlib.jsonl``, so that
    ingest's default ids, the file and line, differ between copies): ``copies`` whole copies, or
    copies until ``megabytes`` of text, the last one cut short. The bytes written."""
    texts = stdlib_texts()
    if (copies is None) == (megabytes is None):
        raise ValueError("give copies or megabytes")
    written, size, copy = 0, 0, 0
    while (copies is not None and copy < copies) or (megabytes is not None and size < megabytes * 1e6):
        records = []
        for path, text in texts:
            records.append({"text": text, "path": path})
            size += len(text.encode("utf-8"))
            if copies is None and size >= megabytes * 1e6:
                break
        written += write_jsonl(folder / f"copy{copy}" / "stdlib.jsonl", records)
        copy += 1
    return written


def factory(*argv: str, home: Path | None = None) -> float:
    """``factory ARGV`` in a fresh process, as a user types it, with ``FACTORY_HOME`` at ``home`` (else
    as this process has it); its seconds. Exits with the command's output when it fails."""
    env = {**os.environ, **({"FACTORY_HOME": str(home)} if home else {})}
    started = time.perf_counter()
    done = subprocess.run(
        # The installed ``factory`` script: under ``python -c``, pyspark's Spark Connect module takes the
        # main module for a doctest run and exits 0 before the filter publishes.
        [str(Path(sys.executable).with_name("factory")), *argv],
        capture_output=True, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"factory {' '.join(argv)} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return time.perf_counter() - started


def ingest_corpus(corpus: Path, table: str, *options: str, home: Path | None = None) -> float:
    """``factory ingest`` of the JSON lines under ``corpus`` into ``table`` as source ``code``, its
    options the defaults (``options`` only name the records' fields or widen a limit); its seconds."""
    return factory(
        "ingest", str(corpus), "--source", "code", "--format", "jsonl", "--output", table, "--path-field", "path",
        *options, home=home,
    )  # fmt: skip


def pin_table(folder: Path, name: str, table: str, home: Path | None = None, heldout_fraction: float = 0.0) -> float:
    """``factory mix pin`` of a one-component spec over ``table`` into ``folder/<name>.json``; its seconds."""
    spec = folder / f"{name}.toml"
    heldout = f"heldout_fraction = {heldout_fraction}\n" if heldout_fraction else ""
    spec.write_text(
        f'name = "{name}"\nseed = 1\n\n[[components]]\nname = "code"\ntable = "{table}"\nweight = 1\n{heldout}'
    )
    return factory("mix", "pin", str(spec), "--output", str(folder / f"{name}.json"), home=home)
