"""What the orchestrated chain runs on: one Dagster resource with the commands' own knobs."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

import dagster as dg
from pydantic import Field

from lakehouse.catalog import factory_home

REPO = Path(__file__).resolve().parent.parent


class FactorySettings(dg.ConfigurableResource):
    """The lakehouse, the source tree, the training run: each empty value takes the same default
    as the `factory` commands (``$FACTORY_HOME``, ``$FACTORY_CATALOG``) or the demo's."""

    home: str = ""  # FACTORY_HOME of the commands ("" = this process's)
    catalog: str = ""  # --catalog NAME ("" = $FACTORY_CATALOG, else the embedded catalog)
    code_path: str = ""  # the source tree ingested as raw.code ("" = the Python standard library)
    include: list[str] = Field(default_factory=lambda: ["*.py"])
    exclude: list[str] = Field(default_factory=lambda: ["site-packages/*", "dist-packages/*"])
    run_dir: str = ""  # the training run's folder ("" = <home>/dagster/run)
    train_config: str = str(REPO / "configs" / "demo-train.toml")
    train_overrides: list[str] = Field(default_factory=list)  # SECTION.KEY=VALUE, as `factory train --set`
    nproc: int = 2
    vocab_size: int = 8192
    eval_suites: list[str] = Field(default_factory=lambda: ["heldout"])
    # Run each command in this process (factory_cli.main.run_command) rather than as a `factory`
    # subprocess: Spark jobs then share one session, which is what tests want; off by default,
    # so a job that crashes takes only its own process with it.
    in_process: bool = False

    def lakehouse(self) -> Path:
        return Path(self.home) if self.home else factory_home()

    def folder(self) -> Path:
        """Where the orchestrated chain keeps its files (tokenizer, spec, manifest)."""
        path = self.lakehouse() / "dagster"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def training_dir(self) -> Path:
        return Path(self.run_dir) if self.run_dir else self.lakehouse() / "dagster" / "run"

    def source_tree(self) -> str:
        return self.code_path or sysconfig.get_paths()["stdlib"]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.home:
            env["FACTORY_HOME"] = self.home
        if self.catalog:
            env["FACTORY_CATALOG"] = self.catalog
        # The commands import this checkout's packages, wherever Dagster was started from.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        return env
