"""The prepare step of tsp-anneal's holdout (trusted): the run step's inputs.

``python prepare.py`` runs with no candidate code, over the protected and holdout files,
and is told the half (``$REVTREE_STAGE``: ``guard`` during the search, ``holdout`` for
the final judge). It writes that half's instances to ``instances.json``, which revtree
copies into the run step's workspace; the run step sees neither holdout.py nor the stage.
"""

import json
import os

import holdout

half = holdout.GUARD if os.environ.get("REVTREE_STAGE") == "guard" else holdout.FINAL
with open("instances.json", "w", encoding="utf-8") as f:
    json.dump(half, f)
