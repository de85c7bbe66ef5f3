"""Bradley–Terry scores of players (checkpoints) from pairwise games (blind ratings), with intervals.

The model: player ``i`` beats ``j`` with probability ``sigmoid(theta_i - theta_j)``. A tie counts
half a win to each side (the usual reading when ties are few; Davidson's tie parameter would need
many ties to estimate). ``theta`` is the maximum of the log-likelihood plus a weak normal prior
(``PRIOR_PRECISION``), which keeps the score of a player that won or lost every game finite and
pins the scale's origin; it is found by Newton's method, the problem being concave and small (a
few checkpoints). Written here with numpy because no pinned library fits it: scikit-learn's
logistic regression could, but takes no fractional outcomes for ties and gives no intervals.

Intervals come from the Fisher information at the maximum (the curvature of the penalised
log-likelihood; ``theta`` normal around it), of each score against the players' mean, so they
are exact functions of the games, and wide while there are few: the bootstrap's percentiles,
the other usual choice, collapse to a point when every game resampled is the same one.
Scores are shown on the Elo scale (``ELO_SCALE`` points per factor 10 in odds) around
``ELO_ORIGIN``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PRIOR_PRECISION = 0.1  # a normal prior with variance 10 on each theta (natural-log odds)
ELO_SCALE = 400 / math.log(10)
ELO_ORIGIN = 1000.0
Z = 1.959963984540054  # the standard normal's 97.5% point: 95% intervals


@dataclass(frozen=True)
class Standing:
    player: str
    score: float  # Elo scale
    low: float  # the 95% interval
    high: float
    games: int
    wins: float  # a tie counts half


def fit(players: Sequence[str], games: Sequence[tuple[str, str, float]]) -> np.ndarray:
    """``theta`` of each of ``players`` (natural-log odds) from games (a, b, a's score in [0, 1])."""
    return _newton(len(players), *_arrays(players, games))[0]


def _arrays(players: Sequence[str], games: Sequence[tuple[str, str, float]]) -> tuple[np.ndarray, ...]:
    index = {p: k for k, p in enumerate(players)}
    a = np.array([index[g[0]] for g in games], dtype=np.int64)
    b = np.array([index[g[1]] for g in games], dtype=np.int64)
    return a, b, np.array([g[2] for g in games], dtype=np.float64)


def _newton(n: int, a: np.ndarray, b: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The maximum ``theta`` and the Hessian of the penalised log-likelihood there."""
    theta = np.zeros(n)
    for _ in range(100):
        p = 1 / (1 + np.exp(-(theta[a] - theta[b])))
        residual, weight = score - p, p * (1 - p)
        gradient = np.bincount(a, residual, n) - np.bincount(b, residual, n) - PRIOR_PRECISION * theta
        hessian = -PRIOR_PRECISION * np.eye(n)
        np.add.at(hessian, (a, a), -weight)
        np.add.at(hessian, (b, b), -weight)
        np.add.at(hessian, (a, b), weight)
        np.add.at(hessian, (b, a), weight)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return theta, hessian


def leaderboard(games: Sequence[tuple[str, str, float]]) -> list[Standing]:
    """Every player of ``games``, best first, with its score and 95% interval."""
    players = sorted({g[0] for g in games} | {g[1] for g in games})
    if not players:
        return []
    a, b, score = _arrays(players, games)
    theta, hessian = _newton(len(players), a, b, score)
    # The data say nothing of the players' common level, only of their differences: the
    # intervals are those of theta minus its mean (which the maximum has at 0, the likelihood's
    # gradient summing to zero over the players).
    centre = np.eye(len(players)) - 1 / len(players)
    spread = Z * np.sqrt(np.diag(centre @ np.linalg.inv(-hessian) @ centre))
    played = np.bincount(a, minlength=len(players)) + np.bincount(b, minlength=len(players))
    wins = np.bincount(a, score, len(players)) + np.bincount(b, 1 - score, len(players))
    standings = [
        Standing(
            p, _elo(theta[k]), _elo(theta[k] - spread[k]), _elo(theta[k] + spread[k]), int(played[k]), float(wins[k])
        )
        for k, p in enumerate(players)
    ]
    return sorted(standings, key=lambda s: (-s.score, s.player))


def _elo(theta: float) -> float:
    return ELO_ORIGIN + ELO_SCALE * float(theta)
