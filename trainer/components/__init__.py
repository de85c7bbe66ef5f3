"""The model's swappable parts, one module per family, each chosen by name from its registry.

``norms.py`` (``model.norm``), ``feedforward.py`` (``model.feed_forward``), ``positions.py``
(``model.positions``) and ``masks.py`` (``model.sliding_window``). ``trainer/model.py`` builds a
block from them and knows no component by name, as torchtitan's models build theirs from its
norm and attention builders: a new component is a class and a registry entry, not a flag.
"""
