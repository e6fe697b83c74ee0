"""Truck loading for the nightly shipment plan.

Parcels of a day go into trucks of one capacity. A greedy pass places the parcels
(first fit or best fit, largest first), then a short annealing pass moves and swaps
parcels between trucks so that the light trucks empty out. The result is scored with
Falkenauer's fill measure, mean((load / capacity) ** 2) over the trucks used, averaged
over a fixed week of days: 1.0 only when every truck leaves full.
"""

import math
import random

STRATEGY = "first_fit"  # or "best_fit"
ANNEAL_STEPS = 400
START_TEMP = 0.5
COOLING = 0.99
MOVE_PROB = 0.7  # chance that a step moves one parcel; otherwise it swaps two
MIN_FILL = 0.6  # trucks loaded below this are emptied first


def make_days(n_days=7, seed=11):
    """A week of days: (capacity, parcel sizes) each."""
    rng = random.Random(seed)
    days = []
    for _ in range(n_days):
        n = rng.randint(60, 90)
        days.append((100, [rng.randint(5, 45) for _ in range(n)]))
    return days


def greedy(parcels, capacity):
    trucks, loads = [], []
    for p in sorted(parcels, reverse=True):
        pick = None
        for i, load in enumerate(loads):
            if load + p > capacity:
                continue
            if STRATEGY == "first_fit":
                pick = i
                break
            if pick is None or load > loads[pick]:
                pick = i
        if pick is None:
            trucks.append([p])
            loads.append(p)
        else:
            trucks[pick].append(p)
            loads[pick] += p
    return trucks


def fill(trucks, capacity):
    used = [t for t in trucks if t]
    return sum((sum(t) / capacity) ** 2 for t in used) / len(used)


def anneal(trucks, capacity, rng):
    trucks = [list(t) for t in trucks]
    current = fill(trucks, capacity)
    temp = START_TEMP
    for _ in range(ANNEAL_STEPS):
        temp *= COOLING
        loads = [sum(t) for t in trucks]
        light = [i for i, load in enumerate(loads) if 0 < load < MIN_FILL * capacity]
        if light and rng.random() < 0.5:
            src = rng.choice(light)
        else:
            src = rng.randrange(len(trucks))
        dst = rng.randrange(len(trucks))
        if src == dst or not trucks[src]:
            continue
        new = [list(t) for t in trucks]
        if rng.random() < MOVE_PROB or not new[dst]:
            parcel = new[src].pop(rng.randrange(len(new[src])))
            if loads[dst] + parcel > capacity:
                continue
            new[dst].append(parcel)
        else:
            i, j = rng.randrange(len(new[src])), rng.randrange(len(new[dst]))
            a, b = new[src][i], new[dst][j]
            if loads[src] - a + b > capacity or loads[dst] - b + a > capacity:
                continue
            new[src][i], new[dst][j] = b, a
        score = fill(new, capacity)
        if score >= current or rng.random() < math.exp((score - current) / temp):
            trucks, current = new, score
    return [t for t in trucks if t]


def plan_day(capacity, parcels, rng):
    trucks = anneal(greedy(parcels, capacity), capacity, rng)
    assert sorted(p for t in trucks for p in t) == sorted(parcels), "a parcel went missing"
    assert all(sum(t) <= capacity for t in trucks), "a truck is overloaded"
    return trucks


def main():
    """The plan of each day of the week: a list of trucks, each a list of parcels."""
    rng = random.Random(3)
    return [plan_day(capacity, parcels, rng) for capacity, parcels in make_days()]


if __name__ == "__main__":
    week = main()
    print(f"mean fill {sum(fill(t, 100) for t in week) / len(week):.4f}")
