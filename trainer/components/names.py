"""The components' names, without torch: the values ``model.norm``, ``model.feed_forward`` and
``model.positions`` take. ``trainer/config.py`` checks a config against these, so loading a
config (``factory train`` before torchrun starts, ``factory rl train``) imports no torch; each
family's module registers its classes under exactly these names (``registry``)."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")

NORM_NAMES = ("rmsnorm", "layernorm")
FEED_FORWARD_NAMES = ("swiglu", "gelu", "squared_relu")
POSITION_NAMES = ("rope", "none")

# The default hidden width per input width: the gated SwiGLU has three matrices, the others two,
# so 8/3 and 4 give each the same parameters and FLOPs (8·dim² a layer) before rounding.
HIDDEN_PER_DIM: dict[str, float] = {"swiglu": 8 / 3, "gelu": 4.0, "squared_relu": 4.0}


def registry(names: tuple[str, ...], classes: dict[str, T]) -> dict[str, T]:
    """``classes`` as a family's registry, refused at import unless it registers exactly ``names``
    in their order: a name the config accepts without a class would fail only inside the ranks."""
    if tuple(classes) != names:
        raise RuntimeError(
            f"the registry {list(classes)} must name exactly {list(names)} (trainer/components/names.py)"
        )
    return classes
