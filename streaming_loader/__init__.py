"""The streaming loader (local or on Ray): planning, reading, tokenizing, packing, mixing, state.

``from streaming_loader import StreamingLoader`` (docs/architecture.md, "The stream"). The class is
imported on first use, so the ``factory`` commands that only need the tokenizer do not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streaming_loader.loader import StreamingLoader
    from streaming_loader.state import merge_states

__all__ = ["StreamingLoader", "merge_states"]


def __getattr__(name: str) -> Any:
    if name == "StreamingLoader":
        from streaming_loader.loader import StreamingLoader

        return StreamingLoader
    if name == "merge_states":
        from streaming_loader.state import merge_states

        return merge_states
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
