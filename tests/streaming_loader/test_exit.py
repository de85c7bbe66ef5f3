"""A script that uses the Ray loader the way the README shows exits promptly and quietly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import REPO
from tests.streaming_loader.conftest import SMALL

# The README's "The loader in Python" block at the small mixture's sizes, iterated a few batches
# and left open, as a script that never calls close() leaves it. The probe is registered before
# Ray is imported, so it runs after Ray's own exit hook (atexit runs last-in, first-out): by then
# no Ray Data pipeline may still be running, or it would start a new Ray (and could hang in connect).
SCRIPT = """
import atexit, sys, threading, time

def probe():
    import ray
    time.sleep(1)
    running = [t.name for t in threading.enumerate() if type(t).__name__ == "StreamingExecutor" and t.is_alive()]
    if running or ray.is_initialized():
        print(f"after Ray's shutdown: pipelines {{running}}, Ray initialized {{ray.is_initialized()}}", file=sys.stderr)
        sys.stderr.flush()

atexit.register(probe)

from streaming_loader import StreamingLoader

rank, world = 0, 1
loader = StreamingLoader.from_manifest(
    {manifest!r},
    tokenizer={tokenizer!r},
    seq_len={seq_len},
    global_batch_size={global_batch_size},
    dp_rank=rank,
    dp_world=world,
    backend="ray",
    read_bytes={read_bytes},
    ray_units_ahead=32,
)
for step, batch in zip(range(1), loader):
    assert batch["input_ids"].shape == ({global_batch_size}, {seq_len})
state = loader.state_dict()
print("done", flush=True)
"""


@pytest.mark.engine
@pytest.mark.slow
def test_a_script_that_never_closes_the_ray_loader_exits_promptly_and_quietly(mixture, tmp_path):
    script = tmp_path / "train_loop.py"
    script.write_text(
        textwrap.dedent(SCRIPT).format(manifest=str(mixture.manifest), tokenizer=str(mixture.tokenizer), **SMALL)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_DISABLE_USAGE_STATS": "1"}
    env.pop("RAY_ADDRESS", None)  # its own local Ray, as a user's script starts
    began = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the script hung at exit; its stderr ended with:\n{(exc.stderr or b'')[-3000:]!r}")
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("done")
    for sign in ("Traceback", "Exception ignored", "after Ray's shutdown", "not the main thread"):
        assert sign not in done.stderr, done.stderr[-3000:]
    assert took < 60
