"""Whether the process that claims a run lives: a module of its own, so that ``revtree
watch`` asks it without loading the run's machinery (``orchestrator.run`` imports the
Store, the git store and the task loader)."""

from __future__ import annotations

import os
import socket


def alive(pid: int, host: str | None) -> bool:
    """Whether the process ``pid`` on ``host`` lives (another host: assumed alive)."""
    if host != socket.gethostname():
        return True  # cannot tell: assume alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
