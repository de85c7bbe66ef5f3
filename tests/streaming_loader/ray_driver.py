"""A loader process on a multi-node Ray cluster (run by test_ray_nodes.py in its own process:
the test process keeps the session's local Ray).

``python -m tests.streaming_loader.ray_driver ADDRESS MANIFEST TOKENIZER OUT BATCHES OPTIONS_JSON
[KILL_AFTER KILL_SID]``: takes BATCHES batches with ``ray_address=ADDRESS`` and saves them to OUT
(torch.save), with the Ray node each reader task ran on, or the error that ended the stream.
With KILL_AFTER, SIGKILLs every process of session KILL_SID (a Ray node) after that many batches.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import torch

import streaming_loader.ray_backend as ray_backend
from streaming_loader import StreamingLoader
from tests.ray_nodes import session_members

_read_and_tokenize = ray_backend._read_and_tokenize
NODES_DIR = os.environ.get("FACTORY_TEST_NODES_DIR", "")  # travels with the task: this is __main__


def _recording_reader(*args):
    """The backend's reader task, noting the node it ran on in a row-less side channel: the
    task's node id, appended to a file named by it (all nodes share this machine's disk)."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    with open(os.path.join(NODES_DIR, node), "a") as out:
        out.write("1\n")
    return _read_and_tokenize(*args)


def main(argv: list[str]) -> int:
    address, manifest, tokenizer, out, batches, options = argv[:6]
    kill_after, kill_sid = (int(argv[6]), int(argv[7])) if len(argv) > 6 else (None, None)
    ray_backend._read_and_tokenize = _recording_reader  # pickled by value: this is __main__
    ray_backend._NODES_EVERY_S = 0.5  # look for nodes often: the tests add one, or stall the look
    got, error = [], None
    try:
        with StreamingLoader.from_manifest(
            manifest, tokenizer, backend="ray", ray_address=address, **json.loads(options)
        ) as loader:
            for i in range(int(batches)):
                if i == kill_after:
                    for pid in session_members(kill_sid):
                        os.kill(pid, signal.SIGKILL)
                got.append(next(loader))
    except Exception as exc:  # the test judges it: a clean failure names what happened
        error = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    torch.save({"batches": got, "error": error}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
