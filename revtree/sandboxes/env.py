"""The allow-listed environment every sandbox gets.

Only a few harmless host variables pass (locale, PATH, timezone); then the task's own
``env``. Any name that looks like a secret (API keys, tokens, passwords, database
URLs) is dropped even if a caller asks for it; so is a variable of the task's ``env``
whose value embeds URL credentials (``scheme://user:password@``) or carries the value
of a secret-named host variable (8 characters or more) under an innocent name. Secrets
never enter a sandbox through its environment (what else a local sandbox can learn,
e.g. from ``/proc``, is listed in ``local.py``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from revtree.tasks.names import is_secret

PASSED_FROM_HOST = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)
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
    host_secrets = [v for k, v in os.environ.items() if is_secret(k) and len(v) >= 8]
    env.update({k: v for k, v in extra.items() if not _leaks(v, host_secrets)})
    return {k: v for k, v in env.items() if not is_secret(k)}


def _leaks(value: str, host_secrets: list[str]) -> bool:
    return URL_CREDENTIALS.search(value) is not None or any(s in value for s in host_secrets)
