"""Circle packing (lite): place N circles in the unit square, maximising the sum of radii."""

import math

N = 10


# EVOLVE-BLOCK-START
def construct_packing():
    """Centres on a grid; then the largest radii that keep the circles apart and inside."""
    cols = math.ceil(math.sqrt(N))
    rows = math.ceil(N / cols)
    centers = [((c + 0.5) / cols, (r + 0.5) / rows) for r in range(rows) for c in range(cols)]
    centers = centers[:N]
    return centers, compute_max_radii(centers)


def compute_max_radii(centers):
    """Radii that fit the square, shrunk pairwise until no two circles overlap."""
    radii = [min(x, y, 1 - x, 1 - y) for x, y in centers]
    for i in range(len(centers)):
        for j in range(i + 1, len(centers)):
            gap = math.dist(centers[i], centers[j])
            if radii[i] + radii[j] > gap:
                scale = gap / (radii[i] + radii[j])
                radii[i] *= scale
                radii[j] *= scale
    return radii


# EVOLVE-BLOCK-END


def run_packing():
    """Called by the evaluator: (centers, radii, sum of radii)."""
    centers, radii = construct_packing()
    return centers, radii, sum(radii)
