"""The playground's generation: a bounded pool of worker threads, and the models it keeps loaded.

A generation runs in one of ``workers`` threads, never in the server's event loop or its page
threads, so a long one leaves every other page answering. At most ``workers + queue``
generations are running or waiting; one more is refused at once (503) rather than queued
without limit. A request waits ``timeout_s`` for its result, then is answered 504; a thread
cannot be stopped, so the worker finishes that generation (``max_new_tokens`` bounds it) and its
slot stays taken until then, which keeps the bound true.

Threads rather than processes: torch releases the GIL in its kernels, and a process pool would
load every model once per process and copy each prompt and result across.

Models are loaded by ``evals/checkpoint_model.py`` (its safe reader: nothing unpickled) and kept,
the ``models`` most recently used, keyed on the checkpoint's identity (a hash of its index and
lineage), so a checkpoint saved again under the same step is loaded again.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.exceptions import HTTPException

from lakehouse.errors import InputError
from ui.sources import BadRequest

if TYPE_CHECKING:
    from evals.checkpoint_model import LoadedCheckpoint

T = TypeVar("T")


@dataclass(frozen=True)
class GenerationSettings:
    workers: int = 1  # generations at once
    queue: int = 4  # generations waiting for a worker, beyond which a request is refused (503)
    timeout_s: float = 120.0  # how long a request waits for its generation (504 after)
    models: int = 4  # models kept loaded, most recently used
    device: str = ""  # torch device; "" is evals' default (cuda when there is one)

    def __post_init__(self) -> None:
        if self.workers < 1 or self.queue < 0 or self.models < 1 or self.timeout_s <= 0:
            raise ValueError(f"generation needs workers >= 1, queue >= 0, models >= 1, timeout > 0: {self}")


class GenerationPool:
    def __init__(self, settings: GenerationSettings) -> None:
        self.settings = settings
        self._executor = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="factory-generate")
        self._slots = threading.BoundedSemaphore(settings.workers + settings.queue)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` in a worker thread; 503 when the pool is full, 504 past the timeout."""
        if not self._slots.acquire(blocking=False):
            limit = self.settings.workers + self.settings.queue
            raise HTTPException(
                503,
                f"the playground is busy: {limit} generations are running or waiting, the most it takes; "
                "try again in a moment",
            )
        try:
            future = self._executor.submit(work, *args)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _done: self._slots.release())
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.settings.timeout_s)
        except TimeoutError:
            raise HTTPException(
                504,
                f"the generation took longer than {self.settings.timeout_s:g} s: ask for fewer new tokens "
                "or fewer checkpoints, or start the UI with a longer --generate-timeout",
            ) from None


class ModelCache:
    def __init__(self, settings: GenerationSettings) -> None:
        self.settings = settings
        self._models: OrderedDict[str, LoadedCheckpoint] = OrderedDict()
        # Held while loading too: two requests for one checkpoint load it once.
        self._lock = threading.Lock()

    def get(self, path: Path) -> LoadedCheckpoint:
        # Imported on the first generation: the other pages, and `factory ui`, start without torch.
        import torch

        from evals.checkpoint_model import checkpoint_identity, load_checkpoint

        try:
            identity = checkpoint_identity(path)
        except (OSError, InputError):  # InputError: checkpoint_identity's own word for no .metadata
            raise BadRequest(f"{path} holds no model weights (no DCP index): it cannot generate") from None
        with self._lock:
            if identity in self._models:
                self._models.move_to_end(identity)
                return self._models[identity]
            device = torch.device(self.settings.device) if self.settings.device else None
            loaded = load_checkpoint(path, device)
            self._models[identity] = loaded
            while len(self._models) > self.settings.models:
                self._models.popitem(last=False)
            return loaded

    def identities(self) -> list[str]:
        """The identities of the loaded models, least recently used first."""
        with self._lock:
            return list(self._models)
