"""Names a task uses that need no validation library (the standard library only), so
that the CLI's help and the sandboxes' environment filter load no pydantic: the search
policies a task may choose, and which environment variable names hold secrets."""

from __future__ import annotations

import re

POLICIES = ("greedy", "random", "optuna", "mcts", "evolution", "bgmcts", "exts", "agentic")
"""The ``[search] policy`` names, in the order help texts list them (one class each in
``revtree.orchestrator.policies``; a check there keeps the two in step)."""

SECRET_NAME = re.compile(
    r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|DATABASE_URL|_DSN$|REVTREE_DB|"
    r"^AWS_|^GOOGLE_APPLICATION|^AZURE_|PRIVATE_KEY|SSH_AUTH_SOCK)",
    re.I,
)


def is_secret(name: str) -> bool:
    """Whether an environment variable name looks like it holds a secret."""
    return SECRET_NAME.search(name) is not None
