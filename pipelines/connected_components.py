"""Connected components of an edge list, in Spark, without GraphFrames or any other jar.

The large-star / small-star algorithm (Kiveris et al., "Connected Components in MapReduce and
Beyond", SoCC 2014) alternates two local rewrites of the edge set until every component is a
star around its smallest node:

- large-star: each node links its larger neighbours to the smallest node of its neighbourhood;
- small-star: each node links itself and its smaller neighbours to the smallest of them.

Both keep the components and shrink the graph's depth; it converges in O(log n) rounds. Node
ids are any orderable Spark type (strings here), and the answer, each node's component
minimum, does not depend on partitioning. Each round's edges are checkpointed (reliably when
the SparkContext has a checkpoint directory, else locally) so the plan never grows with rounds.
"""

from __future__ import annotations

import logging
import math

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pipelines.spark_session import NO_ADAPTIVE, session_conf

log = logging.getLogger("factory.components")

MAX_ROUNDS = 64  # O(log n) rounds suffice; this bound only guards against a bug looping forever
# Shuffle partitions per this many edges: a few rounds of tiny shuffles cost more in task
# overhead than in work, so a small graph runs in one partition and a big one in many.
EDGES_PER_PARTITION = 1_000_000


def connected_components(edges: DataFrame, src: str = "a", dst: str = "b", edge_count: int | None = None) -> DataFrame:
    """``(node, component)`` for every node of ``edges``: component is the smallest node connected to it.

    Nodes that appear in no edge are not returned (they are their own component).
    """
    edge_count = edges.count() if edge_count is None else edge_count
    n = max(1, math.ceil(edge_count / EDGES_PER_PARTITION))
    with session_conf(edges.sparkSession, NO_ADAPTIVE):
        return _converge(edges, src, dst, n)


def _converge(edges: DataFrame, src: str, dst: str, n: int) -> DataFrame:
    current = _checkpoint(
        edges.select(F.col(src).alias("u"), F.col(dst).alias("v"))
        .where(F.col("u") != F.col("v"))
        .repartition(n, "u")
        .distinct()
    )
    for round_number in range(1, MAX_ROUNDS + 1):
        current = _checkpoint(_small_star(_large_star(current, n), n))
        if _is_star_forest(current, n):
            log.info("connected components: converged after %d round(s)", round_number)
            break
    else:  # pragma: no cover - bounded by the algorithm's O(log n) rounds
        raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds")
    leaves = current.select(F.col("u").alias("node"), F.col("v").alias("component"))
    roots = current.select(F.col("v").alias("node")).distinct().withColumn("component", F.col("node"))
    return leaves.unionByName(roots)


def _large_star(edges: DataFrame, n: int) -> DataFrame:
    """Each node u links every neighbour v > u to m(u), the smallest of u and its neighbours."""
    both = edges.unionByName(edges.select(F.col("v").alias("u"), F.col("u").alias("v"))).repartition(n, "u")
    smallest = F.least(F.col("u"), F.min("v").over(Window.partitionBy("u")))
    return (
        both.withColumn("m", smallest)
        .where(F.col("v") > F.col("u"))
        .select(F.col("v").alias("u"), F.col("m").alias("v"))
    )  # repeats are harmless here: small-star removes them


def _small_star(edges: DataFrame, n: int) -> DataFrame:
    """Each node u links itself and its neighbours v < u to the smallest of those neighbours."""
    # u > v: v is a smaller neighbour of u
    oriented = edges.select(F.greatest("u", "v").alias("u"), F.least("u", "v").alias("v")).repartition(n, "u")
    with_min = oriented.withColumn("m", F.min("v").over(Window.partitionBy("u")))
    neighbours = with_min.where(F.col("v") != F.col("m")).select(F.col("v").alias("u"), F.col("m").alias("v"))
    itself = with_min.select(F.col("u"), F.col("m").alias("v"))
    return neighbours.unionByName(itself).repartition(n, "u").distinct()


def _is_star_forest(edges: DataFrame, n: int) -> bool:
    """Done when every edge (u, v) has v < u, each u has one v, and no v is itself some u's child."""
    roles = edges.select(F.col("u").alias("node"), F.lit(1).alias("parents"), F.lit(0).alias("centre")).unionByName(
        edges.select(F.col("v").alias("node"), F.lit(0).alias("parents"), F.lit(1).alias("centre"))
    )
    per_node = (
        roles.repartition(n, "node")
        .groupBy("node")
        .agg(F.sum("parents").alias("parents"), F.max("centre").alias("centre"))
    )
    return per_node.where((F.col("parents") > 1) | ((F.col("parents") > 0) & (F.col("centre") > 0))).isEmpty()


def _checkpoint(df: DataFrame) -> DataFrame:
    """Materialise ``df`` and cut its lineage: reliable storage when configured, else executor memory/disk."""
    if df.sparkSession.sparkContext.getCheckpointDir():
        return df.checkpoint(eager=True)
    return df.localCheckpoint(eager=True)
