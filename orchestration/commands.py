"""Running a `factory` command for Dagster: the command is the unit of work, Dagster decides when.

The runner is the ``commands`` resource. Under ``dagster dev`` or the daemon it starts
``python -m factory_cli.main ARGV`` (``SubprocessRunner``): a job that crashes takes only its
own process with it. ``factory run`` hands in a runner that calls the command in its own process
instead, so Spark jobs share one session (the command line is the floor above this one, so it
passes the runner down rather than this floor importing it).

Each command's run id is derived from what it runs on (the pinned inputs and its options), never
from Dagster's run: materialising again, a retried Dagster run and a restarted daemon all give
the command the run id it had, and the run-id binding (docs/architecture.md, "The commit
protocol", step 4) finishes what an earlier attempt left, or does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

REPO = Path(__file__).resolve().parent.parent

# (argv, a line logger) → (exit status, what it printed).
CommandRunner = Callable[[Sequence[str], Callable[[str], None]], tuple[int, str]]


class SubprocessRunner:
    """Each command in a fresh ``factory`` process, its output streamed line by line to the log."""

    streams = True

    def __call__(self, argv: Sequence[str], log: Callable[[str], None]) -> tuple[int, str]:
        env = dict(os.environ)
        # The commands import this checkout's packages, wherever Dagster was started from.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        lines = []
        with subprocess.Popen(
            [sys.executable, "-m", "factory_cli.main", *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as proc:
            for line in proc.stdout:
                lines.append(line)
                log(line.rstrip("\n"))
        return proc.returncode, "".join(lines)


def run_factory(context: dg.AssetExecutionContext | dg.OpExecutionContext, argv: Sequence[str]) -> str:
    """Run ``factory ARGV`` with the ``commands`` resource; return what it printed. A non-zero exit
    fails the Dagster step with the command's own ``error:`` line."""
    argv = [str(a) for a in argv]
    context.log.info("factory %s", " ".join(argv))
    runner: CommandRunner = context.resources.commands
    code, output = runner(argv, context.log.info)
    if not getattr(runner, "streams", False):
        for line in output.splitlines()[-60:]:
            context.log.info(line)
    if code != 0:
        errors = [line for line in output.splitlines() if line.startswith("error")]
        raise dg.Failure(
            description=f"factory {argv[0]} exited with {code}: {errors[-1] if errors else output[-2000:]}",
            metadata={"command": "factory " + " ".join(argv)},
        )
    return output


def run_id(*parts: Any) -> str:
    """``<first part>-<hash of all parts>``: a command's run id from what it runs on."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{parts[0]}-{digest}"[:128]


def printed(output: str) -> dg.MetadataValue:
    """The command's last lines, as the run's page shows them."""
    return dg.MetadataValue.md(f"```\n{output[-3000:]}\n```")
