"""The model's swappable components, each set apart from the default (shared by the trainer's,
the KV cache's, generation's and the export's tests)."""

from __future__ import annotations

import json

COMPONENTS: dict[str, dict] = {
    "layernorm": {"norm": "layernorm"},
    "gelu": {"feed_forward": "gelu"},
    "squared_relu": {"feed_forward": "squared_relu"},
    "qk_norm": {"qk_norm": True},
    "tied": {"tie_embeddings": True},
    "nope": {"positions": "none"},
    "sliding_window": {"sliding_window": 5},
}


def overrides(component: str) -> list[str]:
    """``--set`` arguments for a variant (TOML values)."""
    return [f"model.{key}={json.dumps(value)}" for key, value in COMPONENTS[component].items()]
