def score(answer, seconds):
    """Falkenauer's fill, mean((load / 100) ** 2) over the trucks, averaged over the week,
    of the plans in the answer, checked against the week's parcels (made here, never
    taken from the program)."""
    import random

    rng = random.Random(11)
    week = []
    for _ in range(7):
        n = rng.randint(60, 90)
        week.append(sorted(rng.randint(5, 45) for _ in range(n)))
    if not isinstance(answer, list) or len(answer) != len(week):
        raise SystemExit(f"expected the plans of {len(week)} days")
    fills = []
    for trucks, parcels in zip(answer, week):
        if sorted(p for t in trucks for p in t) != parcels:
            raise SystemExit("a plan does not ship exactly the day's parcels")
        if any(sum(t) > 100 for t in trucks):
            raise SystemExit("a truck is overloaded")
        used = [t for t in trucks if t]
        fills.append(sum((sum(t) / 100) ** 2 for t in used) / len(used))
    return sum(fills) / len(fills)
