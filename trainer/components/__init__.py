"""The model's swappable parts, one module per family, each chosen by name from its registry.

``norms.py`` (``model.norm``), ``feedforward.py`` (``model.feed_forward``), ``positions.py``
(``model.positions``) and ``masks.py`` (``model.sliding_window``). ``trainer/model.py`` builds a
block from them and knows no component by name, the way torchtitan's models take their norms
from ``build_norm(norm_type, dim, eps)`` (``torchtitan/models/norms.py``): a new component is a
class, its name in ``names.py`` (what the config accepts, read without torch) and a registry
entry, not a flag threaded through the model.
"""
