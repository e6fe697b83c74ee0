"""Where runs are kept by default, without importing SQLAlchemy: ``revtree ls`` on a home
with no database answers from here alone (issue 24: commands start at once)."""

from __future__ import annotations

import os
from pathlib import Path


def revtree_home() -> Path:
    """``$REVTREE_HOME``, by default ``~/.revtree``."""
    return Path(os.environ.get("REVTREE_HOME") or Path.home() / ".revtree").expanduser()


def default_url() -> str:
    """``$REVTREE_DB``, else the SQLite file ``$REVTREE_HOME/revtree.db``."""
    return os.environ.get("REVTREE_DB") or f"sqlite:///{revtree_home() / 'revtree.db'}"


def no_default_database() -> bool:
    """True where no database is named and the default SQLite file does not exist (a
    read has nothing to read: no store need be opened)."""
    return not os.environ.get("REVTREE_DB") and not (revtree_home() / "revtree.db").exists()
