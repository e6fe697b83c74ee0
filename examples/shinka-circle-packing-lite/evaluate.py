"""ShinkaEvolve evaluator for circle packing (lite), standard library only.

Run as ShinkaEvolve does: python evaluate.py --program_path initial.py --results_dir DIR
It writes DIR/metrics.json and DIR/correct.json through shinka.core.run_shinka_eval.
"""

import argparse
import math

from shinka.core import run_shinka_eval

N = 10


def validate_packing(run_output, atol=1e-6):
    """(valid, message): N circles, non-negative radii, inside the square, no overlaps."""
    centers, radii, reported = run_output
    if len(centers) != N or len(radii) != N:
        return False, f"expected {N} circles, got {len(centers)} centres and {len(radii)} radii"
    if any(r < 0 for r in radii):
        return False, "negative radius"
    if abs(sum(radii) - reported) > atol:
        return False, f"sum of radii {sum(radii):.6f} does not match reported {reported:.6f}"
    for i in range(N):
        (x, y), r = centers[i], radii[i]
        if x - r < -atol or x + r > 1 + atol or y - r < -atol or y + r > 1 + atol:
            return False, f"circle {i} at ({x:.4f}, {y:.4f}) with r={r:.4f} leaves the square"
    for i in range(N):
        for j in range(i + 1, N):
            if math.dist(centers[i], centers[j]) < radii[i] + radii[j] - atol:
                return False, f"circles {i} and {j} overlap"
    return True, "valid packing"


def aggregate_metrics(results):
    centers, radii, reported = results[0]
    return {
        "combined_score": float(reported),
        "public": {
            "num_circles": len(radii),
            "centers_str": "; ".join(f"({x:.3f}, {y:.3f})" for x, y in centers),
        },
        "private": {"reported_sum_of_radii": float(reported)},
    }


def main(program_path, results_dir):
    metrics, correct, error = run_shinka_eval(
        program_path=program_path,
        results_dir=results_dir,
        experiment_fn_name="run_packing",
        num_runs=1,
        get_experiment_kwargs=lambda run_index: {},
        validate_fn=validate_packing,
        aggregate_metrics_fn=aggregate_metrics,
    )
    print("correct" if correct else f"incorrect: {error}", metrics.get("combined_score"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Circle packing (lite) evaluator")
    parser.add_argument("--program_path", default="initial.py")
    parser.add_argument("--results_dir", default="results")
    args = parser.parse_args()
    main(args.program_path, args.results_dir)
