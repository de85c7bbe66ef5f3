"""Connected components in Spark (large-star / small-star) against scipy on the same graphs."""

from __future__ import annotations

import random

import numpy as np

from pipelines.connected_components import connected_components
from pipelines.similarity import components


def spark_components(spark, edges: list[tuple[str, str]]) -> dict[str, str]:
    df = spark.createDataFrame(edges, "a string, b string")
    return {row.node: row.component for row in connected_components(df).collect()}


def expected(edges: list[tuple[str, str]]) -> dict[str, str]:
    nodes = sorted({n for edge in edges for n in edge})
    index = {n: i for i, n in enumerate(nodes)}
    labels = components(len(nodes), np.array([index[a] for a, _ in edges]), np.array([index[b] for _, b in edges]))
    return {n: nodes[labels[i]] for i, n in enumerate(nodes)}


def test_a_long_path_needs_several_rounds_and_ends_in_one_star(spark):
    # Numbered so that the path zig-zags through the order: no single round can finish it.
    order = list(range(40))
    random.Random(5).shuffle(order)
    edges = [(f"n{order[i]:03d}", f"n{order[i + 1]:03d}") for i in range(39)]
    assert spark_components(spark, edges) == {f"n{i:03d}": "n000" for i in range(40)}


def test_random_graph_matches_scipy_whatever_the_partitioning(spark):
    rng = random.Random(6)
    edges = [(f"d{rng.randrange(400):04d}", f"d{rng.randrange(400):04d}") for _ in range(300)]
    edges += [("x", "x"), ("y", "z"), ("z", "y")]  # a self-loop and a repeated edge
    want = expected([e for e in edges if e[0] != e[1]])
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        for partitions in ("1", "7"):
            spark.conf.set("spark.sql.shuffle.partitions", partitions)
            assert spark_components(spark, edges) == want
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)


def test_no_edges_no_components(spark):
    assert spark_components(spark, []) == {}
