"""The allow-listed environment every sandbox gets.

Only a few harmless host variables pass (locale, PATH, timezone); then the task's own
``env``. Any name that looks like a secret (API keys, tokens, passwords, database
URLs) is dropped even if a caller asks for it: secrets never enter a sandbox.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

PASSED_FROM_HOST = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
SECRET_NAME = re.compile(
    r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|DATABASE_URL|_DSN$|REVTREE_DB|"
    r"^AWS_|^GOOGLE_APPLICATION|^AZURE_|PRIVATE_KEY|SSH_AUTH_SOCK)",
    re.I,
)


def is_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


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
