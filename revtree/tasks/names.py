"""Names a task uses that need no validation library (the standard library only), so
that the CLI's help, the sandboxes' environment filter and the agents' path checks load
no pydantic: the search policies a task may choose, which environment variable names
hold secrets, and which paths a task's globs match."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

POLICIES = ("greedy", "random", "optuna", "mcts", "evolution", "bgmcts", "exts", "agentic")
"""The ``[search] policy`` names, in the order help texts list them (one class each in
``revtree.orchestrator.policies``; a check there keeps the two in step)."""

SANDBOXES = ("auto", "local", "bwrap", "docker")
"""The built-in ``[sandbox] backend`` names (``revtree.sandboxes.registry.BUILTIN`` has a
module for each but ``auto``, which chooses among them; a test keeps the two in step)."""

EDIT_FORMATS = ("auto", "search_replace", "whole_file")
"""The built-in ``[agents] edit_format`` names (``revtree.agents.formats.BUILTIN`` has a
class for each; a test keeps the two in step)."""

SECRET_NAME = re.compile(
    r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|DATABASE_URL|_DSN$|REVTREE_DB|"
    r"^AWS_|^GOOGLE_APPLICATION|^AZURE_|PRIVATE_KEY|SSH_AUTH_SOCK)",
    re.I,
)


@functools.lru_cache(maxsize=4096)  # every evaluation asks of every variable
def is_secret(name: str) -> bool:
    """Whether an environment variable name looks like it holds a secret."""
    return SECRET_NAME.search(name) is not None


def matches(path: str, globs: Iterable[str]) -> bool:
    """Whether a relative posix path matches any glob.

    Globs follow git and pathlib: ``*`` and ``?`` stay within one folder, ``**`` spans
    folders (``**/x`` also matches ``x`` at the top), ``[...]`` is a character class.
    """
    return any(_glob_regex(g).fullmatch(path) is not None for g in globs)


@functools.lru_cache(maxsize=1024)
def _glob_regex(glob: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := glob.find("]", i + 2)) != -1:
            body = glob[i + 1 : end]
            out.append(
                "[" + ("^" + body[1:] if body[0] in "!^" else body).replace("\\", "\\\\") + "]"
            )
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))
