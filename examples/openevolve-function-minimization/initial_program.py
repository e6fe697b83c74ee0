# EVOLVE-BLOCK-START
"""Function minimization: find the global minimum of a rugged 2-D function."""

import math
import random


def search_algorithm(iterations=200, bounds=(-5.0, 5.0)):
    """Random search: sample points, keep the best one seen."""
    best_x = random.uniform(*bounds)
    best_y = random.uniform(*bounds)
    best_value = evaluate_function(best_x, best_y)
    for _ in range(iterations):
        x = random.uniform(*bounds)
        y = random.uniform(*bounds)
        value = evaluate_function(x, y)
        if value < best_value:
            best_x, best_y, best_value = x, y, value
    return best_x, best_y, best_value


# EVOLVE-BLOCK-END


def evaluate_function(x, y):
    """The function to minimise: many local minima, global minimum near (-1.70, 0.68)."""
    return math.sin(x) * math.cos(y) + math.sin(x * y) + (x**2 + y**2) / 20


def run_search():
    return search_algorithm()


if __name__ == "__main__":
    x, y, value = run_search()
    print(f"minimum near ({x:.4f}, {y:.4f}): {value:.4f}")
