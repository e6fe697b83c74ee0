"""Simulated annealing for the travelling salesman problem (plain Python, stdlib only).

``solve(points, seed)`` returns a closed tour as a permutation of the city indices.
The tuning knobs are the module-level constants below; revtree rewrites them in place.
Every value inside the ranges declared in task.toml gives a correct (if not good) tour.
"""

from __future__ import annotations

import math
import random

INITIAL_TEMP = 2.0  # temperature at the first step (good tours here are ~6 long)
FINAL_TEMP = 0.01  # temperature at the last step; geometric schedule in between
STEPS = 25000  # total annealing steps per instance, shared by all restarts
TWO_OPT_PROB = 0.15  # chance of a 2-opt reversal; otherwise an or-opt segment move
RESTARTS = 4  # independent annealing runs splitting the STEPS budget; the best tour wins
INIT = "random"  # starting tour: "random" permutation or greedy "nearest" neighbour


def distance_matrix(points):
    return [[math.hypot(xa - xb, ya - yb) for (xb, yb) in points] for (xa, ya) in points]


def tour_length(tour, dist):
    return sum(dist[tour[i - 1]][tour[i]] for i in range(len(tour)))


def initial_tour(n, dist, rng):
    if INIT == "nearest":
        start = rng.randrange(n)
        tour, left = [start], set(range(n)) - {start}
        while left:
            row = dist[tour[-1]]
            nxt = min(left, key=row.__getitem__)
            tour.append(nxt)
            left.remove(nxt)
        return tour
    tour = list(range(n))
    rng.shuffle(tour)
    return tour


def anneal(tour, dist, rng, steps):
    """Anneal ``tour`` for ``steps`` moves; return (best tour, its length)."""
    n = len(tour)
    cur = tour_length(tour, dist)
    best, best_len = tour[:], cur
    if n < 5 or steps <= 0:
        return best, best_len
    t = float(INITIAL_TEMP)
    alpha = (float(FINAL_TEMP) / t) ** (1.0 / steps)
    p2 = float(TWO_OPT_PROB)
    rand, exp = rng.random, math.exp
    for _ in range(steps):
        if rand() < p2:
            # 2-opt: reverse tour[i+1 .. j]; edges (a,b),(c,e) become (a,c),(b,e).
            i = int(rand() * n)
            j = int(rand() * n)
            if i > j:
                i, j = j, i
            if j - i < 2:
                t *= alpha
                continue
            a, b, c, e = tour[i], tour[i + 1], tour[j], tour[(j + 1) % n]
            da, db = dist[a], dist[b]
            delta = da[c] + db[e] - da[b] - dist[c][e]
            if delta <= 0 or rand() < exp(-delta / t):
                tour[i + 1 : j + 1] = tour[i + 1 : j + 1][::-1]
                cur += delta
        else:
            # or-opt: move the segment tour[s .. s+k-1] between u and v, maybe reversed.
            k = 1 + int(rand() * 3)
            s = int(rand() * (n - k + 1))
            p, q = tour[s - 1], tour[(s + k) % n]
            f, g = tour[s], tour[s + k - 1]
            pos = (s + k + int(rand() * (n - k - 1))) % n  # any city outside the segment but p
            u, v = tour[pos], tour[(pos + 1) % n]
            du = dist[u]
            removed = dist[p][q] - dist[p][f] - dist[g][q] - du[v]
            fwd = du[f] + dist[g][v]
            rev = du[g] + dist[f][v]
            flip = rev < fwd
            delta = removed + (rev if flip else fwd)
            if delta <= 0 or rand() < exp(-delta / t):
                seg = tour[s : s + k]
                if flip:
                    seg.reverse()
                if pos > s:
                    tour = tour[:s] + tour[s + k : pos + 1] + seg + tour[pos + 1 :]
                else:
                    tour = tour[: pos + 1] + seg + tour[pos + 1 : s] + tour[s + k :]
                cur += delta
        if cur < best_len - 1e-12:
            best, best_len = tour[:], cur
        t *= alpha
    best_len = tour_length(best, dist)  # drop accumulated float drift
    return best, best_len


def solve(points, seed):
    """A short closed tour through ``points`` (a list of (x, y)), as a list of indices."""
    n = len(points)
    if n <= 3:
        return list(range(n))
    rng = random.Random(seed)
    dist = distance_matrix(points)
    runs = max(1, int(RESTARTS))
    per_run = max(1, int(STEPS) // runs)
    best, best_len = None, math.inf
    for _ in range(runs):
        tour, length = anneal(initial_tour(n, dist, rng), dist, rng, per_run)
        if length < best_len:
            best, best_len = tour, length
    return best
