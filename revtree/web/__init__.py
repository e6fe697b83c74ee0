"""The web dashboard (``revtree dashboard``, ``revtree run --dashboard``): a Starlette
app over the SQL store; see docs/dashboard.md for its API and docs/architecture.md."""

from revtree.web.app import create_app
from revtree.web.serve import Dashboard, PortBusy

__all__ = ["Dashboard", "PortBusy", "create_app"]
