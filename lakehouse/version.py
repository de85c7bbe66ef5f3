"""The code version recorded with every snapshot and checkpoint."""

from __future__ import annotations

import functools
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "model-factory"


@functools.cache
def code_version() -> str:
    """``<package version>`` plus ``+g<commit>`` (and ``.dirty``) when run from a git checkout."""
    try:
        package = version(DISTRIBUTION)
    except PackageNotFoundError:
        package = "0+unknown"
    commit = _git_commit(Path(__file__).resolve().parent.parent)
    return f"{package}+g{commit}" if commit else package


def _git_commit(repo: Path) -> str | None:
    if not (repo / ".git").exists():
        return None
    try:
        commit = _git(repo, "rev-parse", "--short=12", "HEAD").stdout.strip()
        dirty = _git(repo, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}.dirty" if dirty else commit or None


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10, check=True)
