"""revtree: grow a tree of git revisions of a code base, scored by its evaluator."""

__version__ = "0.1.0"
