"""The RL environment's builder as a Spark job: ``spark-submit pipelines/rl_tasks.py build ARGS``.

The job itself lives in ``rl/build.py`` (a floor above the pipelines: it runs the sandbox of
``evals``); this file is only its spark-submit entry, as ``factory rl build ARGS``.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # `spark-submit pipelines/rl_tasks.py build ARGS` is `factory rl build ARGS`
    from factory_cli.main import run_command

    sys.exit(run_command("rl", sys.argv[1:], prog="rl_tasks.py"))
