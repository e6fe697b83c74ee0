"""The allow-listed environment every sandbox gets.

Only a few harmless host variables pass (locale, PATH, timezone); then the task's own
``env``. Any name that looks like a secret (API keys, tokens, passwords, database
URLs) is dropped even if a caller asks for it: secrets never enter a sandbox.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from revtree.tasks.spec import is_secret

PASSED_FROM_HOST = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
__all__ = ["PASSED_FROM_HOST", "is_secret", "sandbox_env"]


def sandbox_env(extra: Mapping[str, str], home: Path | str, tmp: Path | str) -> dict[str, str]:
    """The environment of a local sandbox process."""
    python_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join([python_bin, "/usr/local/bin", "/usr/bin", "/bin"])
    env = {k: os.environ[k] for k in PASSED_FROM_HOST if k in os.environ}
    env.update(
        PATH=path,
        HOME=str(home),
        TMPDIR=str(tmp),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONHASHSEED="0",
    )
    env.update(extra)
    return {k: v for k, v in env.items() if not is_secret(k)}
