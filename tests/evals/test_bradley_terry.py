"""The Bradley–Terry fit behind the ratings' leaderboard: it recovers known strengths, its intervals
hold them and narrow with the games, it stays finite when a player won every game, and treats a
tie as half a win."""

from __future__ import annotations

import math

import numpy as np

from evals.bradley_terry import ELO_ORIGIN, ELO_SCALE, fit, leaderboard


def simulated(strengths: dict[str, float], games: int, seed: int) -> list[tuple[str, str, float]]:
    rng = np.random.default_rng(seed)
    players = sorted(strengths)
    played = []
    for _ in range(games):
        a, b = rng.choice(players, 2, replace=False)
        p = 1 / (1 + math.exp(strengths[b] - strengths[a]))
        played.append((str(a), str(b), float(rng.random() < p)))
    return played


def test_the_fit_recovers_the_strengths_games_were_drawn_from():
    truth = {"x": 0.0, "y": 1.0, "z": 2.0}
    theta = fit(["x", "y", "z"], simulated(truth, 4000, seed=1))
    differences = theta - theta[0]
    assert np.allclose(differences, [0.0, 1.0, 2.0], atol=0.15), differences


def test_the_leaderboard_ranks_with_intervals_that_hold_the_truth_and_narrow_with_the_games():
    truth = {"weak": 0.0, "middle": 1.0, "strong": 2.5}
    mean = sum(truth.values()) / len(truth)
    widths = []
    for count in (30, 300, 3000):
        games = simulated(truth, count, seed=2)
        board = leaderboard(games)
        assert [s.player for s in board] == ["strong", "middle", "weak"]
        for s in board:  # the scores are against the players' mean, as the intervals are
            assert s.low < ELO_ORIGIN + ELO_SCALE * (truth[s.player] - mean) < s.high, (count, s)
        assert sum(s.games for s in board) == 2 * len(games)
        assert sum(s.wins for s in board) == len(games)  # one win per game, ties halved
        assert leaderboard(games) == board
        widths.append(board[0].high - board[0].low)
    assert widths[0] > 2 * widths[1] > 4 * widths[2]


def test_a_player_that_won_every_game_has_a_finite_score():
    board = leaderboard([("a", "b", 1.0)] * 6)
    assert [s.player for s in board] == ["a", "b"]
    assert all(math.isfinite(v) for s in board for v in (s.score, s.low, s.high))
    assert board[0].score - board[1].score > ELO_SCALE  # better than e:1 odds
    (once, _) = leaderboard([("a", "b", 1.0)])
    assert once.high - once.low > 4 * ELO_SCALE  # one game tells little: a wide interval


def test_a_tie_is_half_a_win_each():
    tied = leaderboard([("a", "b", 0.5)] * 4 + [("b", "a", 0.5)] * 4)
    assert tied[0].score == tied[1].score and tied[0].wins == tied[1].wins == 4.0
    # Two ties weigh as one win each way.
    assert np.allclose(fit(["a", "b"], [("a", "b", 0.5)] * 2), fit(["a", "b"], [("a", "b", 1.0), ("b", "a", 1.0)]))
    assert leaderboard([]) == []
