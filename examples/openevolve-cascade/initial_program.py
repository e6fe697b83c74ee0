"""Guess the number the evaluator hides: a toy with OpenEvolve's cascade shape."""

# EVOLVE-BLOCK-START
GUESS = 0.5
# EVOLVE-BLOCK-END


def guess() -> float:
    return GUESS
