"""The dialect corpus: answers written the way real models write edits.

Each case is one whole answer with the result it must have: the files it changes (a
well-formed answer lands) or the specific refusal (an out-of-scope or ill-posed edit
never lands). ``acceptance()`` gives the share that behaved as expected per dialect;
``python -m benchmarks.dialects`` prints it as a table.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pytest

from revtree.agents.edits import apply_edits, parse_edits
from revtree.errors import EditError

PROGRAM = '''"""Circle packing in the unit square."""
import math

# EVOLVE-BLOCK-START
def pack(n):
    """Place n circles on a grid."""
    radius = 0.1
    centers = []
    for i in range(n):
        x = (i % 5) * 0.2 + 0.1
        y = (i // 5) * 0.2 + 0.1
        centers.append((x, y))
    return centers, radius
# EVOLVE-BLOCK-END


def run():
    return pack(26)
'''
EVALUATOR = "import initial_program\nprint(initial_program.run())\n"
MODEL = """from helpers import transform

SCALE = 1.0


def predict(x):
    return transform(x) * SCALE
"""
HELPERS = """def transform(x):
    return x + 1


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
"""
EV = "import json, model\nprint(json.dumps({'err': model.predict(1)}))\n"

#: OpenEvolve shape: one editable program with an EVOLVE-BLOCK, and its evaluator
SOLO = ({"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR}, ("initial_program.py",))
#: a native task: two editable files and a protected evaluator
PAIR = ({"model.py": MODEL, "helpers.py": HELPERS, "ev.py": EV}, ("model.py", "helpers.py"))


def sub(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


@dataclass(frozen=True)
class Case:
    dialect: str
    name: str
    task: tuple[dict[str, str], tuple[str, ...]]
    answer: str
    lands: dict[str, str] | None = None  # the changed files, or None: refused
    refusal: str = ""  # a fragment of the refusal

    @property
    def out_of_scope(self) -> bool:
        return self.lands is None


RADIUS = sub(PROGRAM, "radius = 0.1", "radius = 0.098")
GRID = sub(
    PROGRAM,
    "        x = (i % 5) * 0.2 + 0.1\n        y = (i // 5) * 0.2 + 0.1\n",
    "        x = (i % 6) * 0.17 + 0.085\n        y = (i // 6) * 0.17 + 0.085\n",
)
SLOPE = sub(HELPERS, "    return x + 1\n", "    return 3 * x\n")
OFFSET = sub(MODEL, "    return transform(x) * SCALE\n", "    return transform(x) * SCALE + 2\n")
CLAMP = sub(HELPERS, "    return x\n", "    return float(x)\n")
NEW_PROGRAM = sub(
    PROGRAM,
    "    radius = 0.1\n    centers = []\n",
    "    radius = 0.099\n    centers = []  # row-major grid\n",
)

SR_RADIUS = "<<<<<<< SEARCH\n    radius = 0.1\n=======\n    radius = 0.098\n>>>>>>> REPLACE\n"
SR_GRID = (
    "<<<<<<< SEARCH\n        x = (i % 5) * 0.2 + 0.1\n        y = (i // 5) * 0.2 + 0.1\n"
    "=======\n        x = (i % 6) * 0.17 + 0.085\n        y = (i // 6) * 0.17 + 0.085\n"
    ">>>>>>> REPLACE\n"
)
SR_SLOPE = "<<<<<<< SEARCH\n    return x + 1\n=======\n    return 3 * x\n>>>>>>> REPLACE\n"
SR_OFFSET = (
    "<<<<<<< SEARCH\n    return transform(x) * SCALE\n=======\n"
    "    return transform(x) * SCALE + 2\n>>>>>>> REPLACE\n"
)

CORPUS: list[Case] = [
    # --- SEARCH/REPLACE with the file named on the line before (the documented form)
    Case("named", "path line", PAIR, "helpers.py\n" + SR_SLOPE, {"helpers.py": SLOPE}),
    Case(
        "named",
        "two files, in fences",
        PAIR,
        "I fit the slope and the offset.\n\n```python\nhelpers.py\n"
        + SR_SLOPE
        + "```\n\n```python\nmodel.py\n"
        + SR_OFFSET
        + "```\n",
        {"helpers.py": SLOPE, "model.py": OFFSET},
    ),
    Case(
        "named",
        "path as a comment inside the fence",
        PAIR,
        "```python\n# helpers.py\n" + SR_SLOPE + "```\n",
        {"helpers.py": SLOPE},
    ),
    Case(
        "named",
        "path in the fence info string",
        PAIR,
        "```python:helpers.py\n" + SR_SLOPE + "```\n",
        {"helpers.py": SLOPE},
    ),
    Case(
        "named",
        "two blocks, one name (the second inherits it)",
        SOLO,
        "initial_program.py\n```python\n" + SR_RADIUS + SR_GRID + "```\n",
        {"initial_program.py": sub(GRID, "radius = 0.1", "radius = 0.098")},
    ),
    # --- bare SEARCH/REPLACE, no file name (OpenEvolve's diff format)
    Case("bare", "single block", SOLO, SR_RADIUS, {"initial_program.py": RADIUS}),
    Case(
        "bare",
        "OpenEvolve style with prose and two blocks",
        SOLO,
        "Looking at the program, a tighter grid should pack more area.\n\n"
        + SR_GRID
        + "\nAnd a smaller radius keeps the circles disjoint:\n\n"
        + SR_RADIUS,
        {"initial_program.py": sub(GRID, "radius = 0.1", "radius = 0.098")},
    ),
    Case(
        "bare",
        "inferred by SEARCH text across two files",
        PAIR,
        "Change the transform:\n\n" + SR_SLOPE + "\nand the prediction:\n\n" + SR_OFFSET,
        {"helpers.py": SLOPE, "model.py": OFFSET},
    ),
    Case(
        "bare",
        "inside a python fence",
        PAIR,
        "```python\n" + SR_OFFSET + "```\n",
        {"model.py": OFFSET},
    ),
    Case(
        "bare",
        "eight-character markers",
        SOLO,
        SR_RADIUS.replace("<<<<<<< ", "<<<<<<<< ").replace(">>>>>>> ", ">>>>>>>> "),
        {"initial_program.py": RADIUS},
    ),
    # --- headers: ### file.py, **file.py**, file.py:, File: `file.py`, with fences
    Case(
        "header",
        "### header",
        PAIR,
        "### helpers.py\n\n```python\n" + SR_SLOPE + "```\n",
        {"helpers.py": SLOPE},
    ),
    Case(
        "header",
        "**bold** header",
        PAIR,
        "**model.py**\n```python\n" + SR_OFFSET + "```\n",
        {"model.py": OFFSET},
    ),
    Case(
        "header",
        "colon label",
        PAIR,
        "helpers.py:\n```python\n" + SR_SLOPE + "```\n",
        {"helpers.py": SLOPE},
    ),
    Case(
        "header",
        "File: `path` label",
        PAIR,
        "File: `model.py`\n```\n" + SR_OFFSET + "```\n",
        {"model.py": OFFSET},
    ),
    Case(
        "header",
        "prose header naming one file",
        PAIR,
        "### Changes to `helpers.py`\n\nThe slope is too small.\n\n```python\n"
        + SR_SLOPE
        + "```\n",
        {"helpers.py": SLOPE},
    ),
    Case(
        "header",
        "two headers, two files",
        PAIR,
        "## Plan\nFit both.\n\n### `helpers.py`\n```python\n"
        + SR_SLOPE
        + "```\n\n### `model.py`\n```python\n"
        + SR_OFFSET
        + "```\n",
        {"helpers.py": SLOPE, "model.py": OFFSET},
    ),
    # --- unified diffs in a diff fence
    Case(
        "udiff",
        "git-style diff with line numbers",
        PAIR,
        "```diff\n--- a/helpers.py\n+++ b/helpers.py\n@@ -1,2 +1,2 @@\n def transform(x):\n"
        "-    return x + 1\n+    return 3 * x\n```\n",
        {"helpers.py": SLOPE},
    ),
    Case(
        "udiff",
        "no line numbers (aider's udiff)",
        SOLO,
        "```diff\n--- initial_program.py\n+++ initial_program.py\n@@ ... @@\n"
        '     """Place n circles on a grid."""\n-    radius = 0.1\n+    radius = 0.098\n'
        "     centers = []\n```\n",
        {"initial_program.py": RADIUS},
    ),
    Case(
        "udiff",
        "two files, two hunks",
        PAIR,
        "```diff\n--- a/helpers.py\n+++ b/helpers.py\n@@ -1,2 +1,2 @@\n def transform(x):\n"
        "-    return x + 1\n+    return 3 * x\n--- a/model.py\n+++ b/model.py\n@@ -6,2 +6,2 @@\n"
        " def predict(x):\n-    return transform(x) * SCALE\n"
        "+    return transform(x) * SCALE + 2\n```\n",
        {"helpers.py": SLOPE, "model.py": OFFSET},
    ),
    Case(
        "udiff",
        "stale context (fuzz)",
        SOLO,
        "```diff\n--- a/initial_program.py\n+++ b/initial_program.py\n@@ -7,4 +7,4 @@\n"
        "     radius = 0.1\n     centers = []\n     for k in range(n):\n"
        "-        x = (i % 5) * 0.2 + 0.1\n-        y = (i // 5) * 0.2 + 0.1\n"
        "+        x = (i % 6) * 0.17 + 0.085\n+        y = (i // 6) * 0.17 + 0.085\n"
        "         centers.append((x, y))\n```\n",
        {"initial_program.py": GRID},
    ),
    Case(
        "udiff",
        "headerless hunk, blank context lines without a space",
        PAIR,
        "```diff\n@@ -4,4 +4,4 @@\n SCALE = 1.0\n\n\n def predict(x):\n"
        "-    return transform(x) * SCALE\n+    return transform(x) * SCALE + 2\n```\n",
        {"model.py": OFFSET},
    ),
    Case(
        "udiff",
        "unfenced diff after prose",
        PAIR,
        "Here is the patch.\n\n--- a/helpers.py\n+++ b/helpers.py\n@@ -9,2 +9,2 @@\n"
        "         return hi\n-    return x\n+    return float(x)\n\nThis keeps types stable.\n",
        {"helpers.py": CLAMP},
    ),
    Case(
        "udiff",
        "the EVOLVE-BLOCK start as context",
        SOLO,
        "```diff\n--- a/initial_program.py\n+++ b/initial_program.py\n@@ -4,3 +4,3 @@\n"
        ' # EVOLVE-BLOCK-START\n def pack(n):\n     """Place n circles on a grid."""\n'
        "-    radius = 0.1\n+    radius = 0.098\n```\n",
        {"initial_program.py": RADIUS},
    ),
    Case(
        "udiff",
        "both markers as context, counts wrong",
        SOLO,
        "--- a/initial_program.py\n+++ b/initial_program.py\n@@ -4,2 +4,2 @@\n"
        ' # EVOLVE-BLOCK-START\n def pack(n):\n     """Place n circles on a grid."""\n'
        "-    radius = 0.1\n+    radius = 0.098\n     centers = []\n     for i in range(n):\n"
        "         x = (i % 5) * 0.2 + 0.1\n         y = (i // 5) * 0.2 + 0.1\n"
        "         centers.append((x, y))\n     return centers, radius\n # EVOLVE-BLOCK-END\n",
        {"initial_program.py": RADIUS},
    ),
    # --- the whole file in a plain fence, no header (a rewrite of the only editable file)
    Case(
        "whole",
        "plain python fence",
        SOLO,
        "Here is the improved program:\n\n```python\n" + NEW_PROGRAM + "```\n",
        {"initial_program.py": NEW_PROGRAM},
    ),
    Case(
        "whole",
        "unlabelled fence",
        SOLO,
        "```\n" + NEW_PROGRAM + "```",
        {"initial_program.py": NEW_PROGRAM},
    ),
    Case(
        "whole",
        "a shell fence and the program",
        SOLO,
        "Run it with:\n```bash\npython evaluator.py\n```\nThe program:\n```python\n"
        + NEW_PROGRAM
        + "```\n",
        {"initial_program.py": NEW_PROGRAM},
    ),
    Case(
        "whole",
        "=== FILE === form",
        PAIR,
        "=== FILE: helpers.py ===\n```python\n" + SLOPE + "```\n",
        {"helpers.py": SLOPE},
    ),
    Case(
        "whole",
        "### header and the whole file",
        PAIR,
        "### model.py\n```python\n" + OFFSET + "```\n",
        {"model.py": OFFSET},
    ),
    # --- reasoning drafts before the answer
    Case(
        "think",
        "<think> with a wrong draft inside",
        SOLO,
        "<think>\nMaybe:\ninitial_program.py\n<<<<<<< SEARCH\n    radius = 0.1\n=======\n"
        "    radius = 0.5\n>>>>>>> REPLACE\nNo, too big. I will change the harness.\n</think>\n\n"
        + SR_RADIUS,
        {"initial_program.py": RADIUS},
    ),
    Case(
        "think",
        "<thinking> then a named block",
        PAIR,
        "<thinking>The error is linear in the slope.</thinking>\nhelpers.py\n" + SR_SLOPE,
        {"helpers.py": SLOPE},
    ),
    Case(
        "think",
        "<reasoning> then a diff",
        PAIR,
        "<reasoning>\nmodel.py needs +2.\n</reasoning>\n```diff\n--- a/model.py\n+++ b/model.py\n"
        "@@ -7 +7 @@\n-    return transform(x) * SCALE\n"
        "+    return transform(x) * SCALE + 2\n```\n",
        {"model.py": OFFSET},
    ),
    Case(
        "think",
        "opening tag stripped by the server",
        SOLO,
        "the grid is 5 wide; use 6\n</think>\n" + SR_GRID,
        {"initial_program.py": GRID},
    ),
    # --- indentation differs from the file
    Case(
        "indent",
        "**file** with the SEARCH dedented",
        SOLO,
        "**initial_program.py**\n```python\n<<<<<<< SEARCH\nx = (i % 5) * 0.2 + 0.1\n"
        "y = (i // 5) * 0.2 + 0.1\n=======\nx = (i % 6) * 0.17 + 0.085\n"
        "y = (i // 6) * 0.17 + 0.085\n>>>>>>> REPLACE\n```\n",
        {"initial_program.py": GRID},
    ),
    Case(
        "indent",
        "nested lines keep their relative indentation",
        PAIR,
        "helpers.py\n<<<<<<< SEARCH\nif x < lo:\n    return lo\n=======\nif x < lo:\n"
        "    print('low')\n    return lo\n>>>>>>> REPLACE\n",
        {
            "helpers.py": sub(
                HELPERS, "        return lo\n", "        print('low')\n        return lo\n"
            )
        },
    ),
    Case(
        "indent",
        "trailing white space in SEARCH",
        PAIR,
        "model.py\n<<<<<<< SEARCH\n    return transform(x) * SCALE   \n=======\n"
        "    return transform(x) * SCALE + 2\n>>>>>>> REPLACE\n",
        {"model.py": OFFSET},
    ),
    Case(
        "indent",
        "over-indented by two",
        SOLO,
        "<<<<<<< SEARCH\n      radius = 0.1\n=======\n      radius = 0.098\n>>>>>>> REPLACE\n",
        {"initial_program.py": RADIUS},
    ),
    # --- prose lines before blocks are never file names (the OpenEvolve failure)
    Case(
        "prose",
        "a sentence right before the block",
        SOLO,
        "I will change the harness.\n" + SR_RADIUS,
        {"initial_program.py": RADIUS},
    ),
    Case(
        "prose",
        "a sentence ending in a colon",
        SOLO,
        "Here is the change I propose:\n```python\n" + SR_GRID + "```\n",
        {"initial_program.py": GRID},
    ),
    Case(
        "prose",
        "a one-word label and a numbered list",
        PAIR,
        "Changes:\n1. Make the slope 3.\n" + SR_SLOPE + "Done.\n",
        {"helpers.py": SLOPE},
    ),
    # --- approximate SEARCH text (a unique fuzzy match)
    Case(
        "fuzzy",
        "a misquoted docstring",
        SOLO,
        '<<<<<<< SEARCH\n    """Place the n circles on a grid."""\n    radius = 0.1\n=======\n'
        '    """Place n circles on a grid."""\n    radius = 0.098\n>>>>>>> REPLACE\n',
        {"initial_program.py": RADIUS},
    ),
    Case(
        "fuzzy",
        "spacing inside a line",
        PAIR,
        "model.py\n<<<<<<< SEARCH\ndef predict(x):\n    return transform(x)*SCALE\n=======\n"
        "def predict(x):\n    return transform(x) * SCALE + 2\n>>>>>>> REPLACE\n",
        {"model.py": OFFSET},
    ),
    # --- several dialects in one answer
    Case(
        "mixed",
        "named block and a diff",
        PAIR,
        "helpers.py\n" + SR_SLOPE + "\n```diff\n--- a/model.py\n+++ b/model.py\n@@ -7 +7 @@\n"
        "-    return transform(x) * SCALE\n+    return transform(x) * SCALE + 2\n```\n",
        {"helpers.py": SLOPE, "model.py": OFFSET},
    ),
    Case(
        "mixed",
        "think, header block and a whole file",
        PAIR,
        "<think>two changes</think>\n### model.py\n```python\n"
        + SR_OFFSET
        + "```\n=== FILE: helpers.py ===\n```python\n"
        + SLOPE
        + "```\n",
        {"helpers.py": SLOPE, "model.py": OFFSET},
    ),
    Case(
        "mixed",
        "bare block and a bold-named block",
        PAIR,
        SR_SLOPE + "\n**model.py**\n" + SR_OFFSET,
        {"helpers.py": SLOPE, "model.py": OFFSET},
    ),
    Case(
        "mixed",
        "whole file then a block on the new text",
        PAIR,
        "=== FILE: helpers.py ===\n```python\n"
        + SLOPE
        + "```\nhelpers.py\n<<<<<<< SEARCH\n    return 3 * x\n=======\n    return 3.0 * x\n"
        ">>>>>>> REPLACE\n",
        {"helpers.py": sub(SLOPE, "3 * x", "3.0 * x")},
    ),
    # --- out of scope, or ill-posed: refused, never applied
    Case(
        "refused",
        "named non-editable file",
        PAIR,
        "ev.py\n<<<<<<< SEARCH\nprint(json.dumps({'err': model.predict(1)}))\n=======\n"
        "print(json.dumps({'err': 0}))\n>>>>>>> REPLACE\n",
        refusal="'ev.py' is not editable",
    ),
    Case(
        "refused",
        "bare block whose text is only in the evaluator",
        PAIR,
        "<<<<<<< SEARCH\nimport json, model\n=======\nimport json\n>>>>>>> REPLACE\n",
        refusal="only in 'ev.py', which is not editable",
    ),
    Case(
        "refused",
        "diff of the evaluator",
        SOLO,
        "```diff\n--- a/evaluator.py\n+++ b/evaluator.py\n@@ -2 +2 @@\n"
        "-print(initial_program.run())\n+print(1.0)\n```\n",
        refusal="'evaluator.py' is not editable",
    ),
    Case(
        "refused",
        "outside the EVOLVE-BLOCK",
        SOLO,
        "<<<<<<< SEARCH\ndef run():\n    return pack(26)\n=======\ndef run():\n"
        "    return pack(30)\n>>>>>>> REPLACE\n",
        refusal="outside the EVOLVE-BLOCK regions",
    ),
    Case(
        "refused",
        "whole-file rewrite that changes code outside the EVOLVE-BLOCK",
        SOLO,
        "```python\n" + sub(NEW_PROGRAM, "pack(26)", "pack(30)") + "```\n",
        refusal="changes text outside the EVOLVE-BLOCK",
    ),
    Case(
        "refused",
        "ambiguous match",
        SOLO,
        "initial_program.py\n<<<<<<< SEARCH\n 0.2 + 0.1\n=======\n 0.17 + 0.085\n>>>>>>> REPLACE\n",
        refusal="ambiguous: it matches 2 places",
    ),
    Case(
        "refused",
        "path traversal",
        PAIR,
        "../model.py\n" + SR_OFFSET,
        refusal="must be relative",
    ),
    Case(
        "refused",
        "absolute path in a diff header",
        PAIR,
        "```diff\n--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root\n+toor\n```\n",
        refusal="must be relative",
    ),
    Case(
        "refused",
        "unnamed whole file on a two-file task",
        PAIR,
        "```python\n" + OFFSET + "```\n",
        refusal="names no file, and 2 files are editable",
    ),
    Case(
        "refused",
        "bare block matching nothing in either file",
        PAIR,
        "<<<<<<< SEARCH\ndef fit(data):\n    pass\n=======\ndef fit(data):\n    return 1\n"
        ">>>>>>> REPLACE\n",
        refusal="matches none of the editable files",
    ),
    Case(
        "refused",
        "moves the EVOLVE-BLOCK end",
        SOLO,
        "<<<<<<< SEARCH\n    return centers, radius\n=======\n    return centers, radius\n"
        "# EVOLVE-BLOCK-END\nPACK = 1\n# EVOLVE-BLOCK-START\n>>>>>>> REPLACE\n",
        refusal="adds, removes or changes an EVOLVE-BLOCK marker",
    ),
    Case(
        "refused",
        "diff that moves the EVOLVE-BLOCK start",
        SOLO,
        "```diff\n--- a/initial_program.py\n+++ b/initial_program.py\n@@ -4,2 +4,2 @@\n"
        "-# EVOLVE-BLOCK-START\n def pack(n):\n+# EVOLVE-BLOCK-START\n```\n",
        refusal="moves an EVOLVE-BLOCK marker",
    ),
    Case(
        "refused",
        "lazy whole file",
        (PAIR[0], ("helpers.py",)),
        "```python\ndef transform(x):\n    return 3 * x\n\n# ... rest unchanged ...\n```\n",
        refusal="leaves code out",
    ),
]


def outcome(case: Case) -> tuple[bool, str]:
    """(behaved as expected, what happened)."""
    files = {p: t.encode() for p, t in case.task[0].items()}
    try:
        out = apply_edits(parse_edits(case.answer), files, case.task[1])
    except EditError as e:
        return (case.lands is None and case.refusal in str(e)), f"refused: {e}"
    got = {p: b.decode() for p, b in out.items()}
    return got == case.lands, f"applied {sorted(got)}"


def acceptance() -> dict[str, tuple[int, int]]:
    """Per dialect: (cases that behaved as expected, cases)."""
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case in CORPUS:
        table[case.dialect][0] += outcome(case)[0]
        table[case.dialect][1] += 1
    return {d: (ok, n) for d, (ok, n) in table.items()}


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: f"{c.dialect}: {c.name}")
def test_case(case: Case) -> None:
    files = {p: t.encode() for p, t in case.task[0].items()}
    if case.lands is None:
        with pytest.raises(EditError, match=case.refusal):
            apply_edits(parse_edits(case.answer), files, case.task[1])
    else:
        out = apply_edits(parse_edits(case.answer), files, case.task[1])
        assert {p: b.decode() for p, b in out.items()} == case.lands


def test_the_corpus_is_large_and_every_dialect_is_at_100_percent() -> None:
    assert len(CORPUS) >= 40
    rates = acceptance()
    assert {"named", "bare", "header", "udiff", "whole", "think", "indent", "prose"} <= set(rates)
    assert all(ok == n for ok, n in rates.values()), rates
    refused = [c for c in CORPUS if c.out_of_scope]
    assert len(refused) >= 10 and not any("applied" in outcome(c)[1] for c in refused)
