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


# Every non-default value in two models (the feed-forwards exclude each other): what the slow
# train-and-resume test runs, two runs rather than one per component (each run is two launches).
COMBINED: dict[str, dict] = {
    "all-but-squared-relu": {k: v for name, c in COMPONENTS.items() if name != "squared_relu" for k, v in c.items()},
    "squared_relu": COMPONENTS["squared_relu"],
}


def overrides(component: str) -> list[str]:
    """``--set`` arguments for a variant or a combination (TOML values)."""
    values = COMPONENTS.get(component) or COMBINED[component]
    return [f"model.{key}={json.dumps(value)}" for key, value in values.items()]
