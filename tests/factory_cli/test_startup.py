"""Commands that do not train or load a model start without torch: importing it costs each
`factory` process 2-3 s of CPU, and the suite alone runs `factory` hundreds of times."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

# A command line (parsed, not run) → the modules its run imports inside functions before it
# would need torch: `factory train`'s parent up to starting torchrun, `lineage` and `ui` whole.
# `eval` and `export` load a model when run: only their parsers (and --help) are checked.
TORCH_FREE: list[tuple[list[str], list[str] | None]] = [
    (["rl", "build"], ["lakehouse.catalog", "pipelines.spark_session", "rl.build"]),
    (["rl", "train", "--config", "c.toml"], ["rl.train_config", "trainer.launch", "trainer.lineage"]),
    (["train", "--config", "c.toml"], ["mixtures.manifest", "streaming_loader.tokenize", "trainer.lineage"]),
    (["lineage", "run"], ["lakehouse.catalog", "evals.results", "evals.samples"]),
    (["eval", "checkpoint"], []),
    (["export", "checkpoint", "--output", "out"], []),
    (["ui"], ["ui.app", "ui.generation", "ui.server", "ui.sources"]),
    # None: run whole, a refusal that finds its checkpoint as the command does, imports and all
    (["lineage", "no-such-run"], None),
]

# Run in a fresh interpreter, each command line in a forked child of it (so that one importing
# torch does not hide another): prints "torch: ARGV" for each after which torch is imported.
_CHECK = """
import importlib, json, os, sys
import lakehouse.catalog  # torch-free (tests/test_layout.py): imported once, the children share it
from factory_cli.main import COMMANDS, build_parser, main
for argv, modules in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        if modules is None:
            main(argv)
        else:
            build_parser(argv[0]).parse_args(argv)
            for module in [COMMANDS[argv[0]][0], *modules]:
                importlib.import_module(module)
        if "torch" in sys.modules:
            print("torch:", *argv, flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        sys.exit(f"factory {' '.join(argv)}: its check failed")
"""


def test_commands_that_need_no_model_do_not_import_torch(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, json.dumps(TORCH_FREE)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "FACTORY_HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with_torch = [
        f"factory {line[len('torch: ') :]}" for line in proc.stdout.splitlines() if line.startswith("torch: ")
    ]
    assert not with_torch, (
        f"{with_torch} import torch: `python -X importtime -m factory_cli.main ...` shows through what"
    )
