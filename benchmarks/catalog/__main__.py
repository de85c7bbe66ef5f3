"""Catalog commit rates: ``python -m benchmarks.catalog`` (see ``commits.py``).

The writers are spawned processes: their functions live in ``commits``, which they can import
(functions of a ``__main__`` run with ``-m`` cannot be found by a spawned child).
"""

import sys

from benchmarks.catalog.commits import main

sys.exit(main())
