"""A stand-in for the part of ShinkaEvolve that evaluators import: ``shinka.core``.

revtree's Shinka runner puts this package on ``PYTHONPATH`` only when no ``shinka`` is
installed, so a real installation always takes precedence.
"""
