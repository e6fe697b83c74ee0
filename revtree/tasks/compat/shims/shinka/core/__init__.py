"""``shinka.core.run_shinka_eval``, the evaluation wrapper of ShinkaEvolve."""

from .wrap_eval import run_shinka_eval

__all__ = ["run_shinka_eval"]
