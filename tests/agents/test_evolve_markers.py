"""EVOLVE-BLOCK markers in edits: quoted as context they are kept, moved they are refused.

The rule is checked on the whole file before and after the edit (``apply_edits``): the
marker lines, in order, and the text around the regions must not change. The diffs are
written as models write them: ``a/``/``b/`` headers, hunk line counts that need not add
up, the marker as the line above or below what changes.
"""

from __future__ import annotations

import pytest

from revtree.agents.edits import apply_edits, parse_edits
from revtree.errors import EditError

PROGRAM = (
    "# Find A and B\n# EVOLVE-BLOCK-START\nA = 2.25\nB = -0.75\n# EVOLVE-BLOCK-END\n\n\n"
    "def value():\n    return A + B\n"
)
CHANGED = PROGRAM.replace("A = 2.25\nB = -0.75\n", "A = 1.875\nB = -0.125\n")
HEAD = "--- a/initial_program.py\n+++ b/initial_program.py\n"
SWAP = "-A = 2.25\n-B = -0.75\n+A = 1.875\n+B = -0.125\n"

#: the issue's diff, and the places a model puts the markers in its context
LANDS = {
    "marker first (the issue's diff)": f"@@ -2,3 +2,3 @@\n # EVOLVE-BLOCK-START\n{SWAP}",
    "marker last": f"@@ -3,3 +3,3 @@\n{SWAP} # EVOLVE-BLOCK-END\n",
    "both markers": f"@@ -2,4 +2,4 @@\n # EVOLVE-BLOCK-START\n{SWAP} # EVOLVE-BLOCK-END\n",
    "wrong counts, context past the region": (
        "@@ -1,5 +1,5 @@\n # Find A and B\n # EVOLVE-BLOCK-START\n"
        f"{SWAP} # EVOLVE-BLOCK-END\n \n \n def value():\n"
    ),
    "no line numbers": f"@@ @@\n # EVOLVE-BLOCK-START\n{SWAP}",
    "marker copied without its trailing space": f"@@ -2,3 +2,3 @@\n # EVOLVE-BLOCK-START\n{SWAP}",
}
#: diffs that change the markers or the text around the regions, and what is said
REFUSED = {
    "moves the start down": (
        "@@ -2,3 +2,3 @@\n-# EVOLVE-BLOCK-START\n A = 2.25\n+# EVOLVE-BLOCK-START\n B = -0.75\n",
        "moves an EVOLVE-BLOCK marker",
    ),
    "moves the end up": (
        "@@ -4,2 +4,2 @@\n-B = -0.75\n # EVOLVE-BLOCK-END\n+B = -0.75\n",
        "moves an EVOLVE-BLOCK marker",
    ),
    "removes the end": (
        "@@ -4,2 +4,1 @@\n B = -0.75\n-# EVOLVE-BLOCK-END\n",
        "adds, removes or changes an EVOLVE-BLOCK marker",
    ),
    "adds a second block": (
        "@@ -4,3 +4,5 @@\n B = -0.75\n # EVOLVE-BLOCK-END\n+# EVOLVE-BLOCK-START\n+C = 1\n"
        "+# EVOLVE-BLOCK-END\n",
        "adds, removes or changes an EVOLVE-BLOCK marker",
    ),
    "changes the marker text": (
        "@@ -2,1 +2,1 @@\n-# EVOLVE-BLOCK-START\n+# EVOLVE-BLOCK-START here\n",
        "adds, removes or changes an EVOLVE-BLOCK marker",
    ),
    "changes code past the marker": (
        "@@ -5,5 +5,5 @@\n # EVOLVE-BLOCK-END\n \n \n def value():\n-    return A + B\n"
        "+    return 3.0\n",
        "changes text outside the EVOLVE-BLOCK regions",
    ),
}


def apply(answer: str, program: str = PROGRAM) -> str:
    files = {"initial_program.py": program.encode()}
    out = apply_edits(parse_edits(answer), files, ["initial_program.py"])
    return out["initial_program.py"].decode()


@pytest.mark.parametrize("name", sorted(LANDS))
@pytest.mark.parametrize("fenced", [False, True], ids=["bare", "fenced"])
def test_a_diff_quoting_markers_as_context_lands(name: str, fenced: bool) -> None:
    diff = HEAD + LANDS[name]
    answer = f"I retune A and B.\n\n```diff\n{diff}```\n" if fenced else diff
    program, changed = PROGRAM, CHANGED
    if "trailing space" in name:
        program, changed = (t.replace("-START\n", "-START  \n") for t in (PROGRAM, CHANGED))
    assert apply(answer, program) == changed


@pytest.mark.parametrize("name", sorted(LANDS))
def test_a_crlf_file_keeps_its_endings(name: str) -> None:
    program = PROGRAM.replace("\n", "\r\n")
    answer = (HEAD + LANDS[name]).replace("\n", "\r\n")  # what the model sent, either way
    assert apply(answer, program) == CHANGED.replace("\n", "\r\n")


def test_search_replace_may_quote_a_marker_that_it_keeps() -> None:
    block = (
        "initial_program.py\n<<<<<<< SEARCH\n# EVOLVE-BLOCK-START\nA = 2.25\n=======\n"
        "# EVOLVE-BLOCK-START\nA = 1.875\n>>>>>>> REPLACE\n"
        "<<<<<<< SEARCH\nB = -0.75\n# EVOLVE-BLOCK-END\n=======\nB = -0.125\n"
        "# EVOLVE-BLOCK-END\n>>>>>>> REPLACE\n"
    )
    assert apply(block) == CHANGED
    moved = block.replace("# EVOLVE-BLOCK-START\nA = 1.875\n", "A = 2.25\n# EVOLVE-BLOCK-START\n")
    with pytest.raises(EditError, match=r"edit 1 .*moves an EVOLVE-BLOCK marker"):
        apply(moved)
    outside = block.replace(
        "# EVOLVE-BLOCK-START\nA = 1.875\n", "A = 1.875\n# EVOLVE-BLOCK-START\n"
    )
    with pytest.raises(EditError, match=r"edit 1 .*changes text outside the EVOLVE-BLOCK"):
        apply(outside)


def test_other_comment_syntaxes_are_markers_alike() -> None:
    c = "int f(void);\n// EVOLVE-BLOCK-START\nint a = 1;\n// EVOLVE-BLOCK-END\nint g;\n"
    files = {"p.c": c.encode()}
    diff = (
        "--- a/p.c\n+++ b/p.c\n@@ -2,2 +2,2 @@\n // EVOLVE-BLOCK-START\n-int a = 1;\n+int a = 2;\n"
    )
    out = apply_edits(parse_edits(diff), files, ["p.c"])
    assert out == {"p.c": c.replace("a = 1", "a = 2").encode()}
    moved = diff.replace("-int a = 1;\n+int a = 2;\n", " int a = 1;\n+// EVOLVE-BLOCK-START\n")
    moved = moved.replace(" // EVOLVE-BLOCK-START\n", "-// EVOLVE-BLOCK-START\n")
    with pytest.raises(EditError, match="moves an EVOLVE-BLOCK marker"):
        apply_edits(parse_edits(moved), files, ["p.c"])


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_marker_added_removed_or_moved_or_a_change_outside_is_refused(name: str) -> None:
    hunk, message = REFUSED[name]
    with pytest.raises(EditError, match=f"edit 1 \\(initial_program.py\\): the edit {message}"):
        apply(HEAD + hunk)


def test_a_whole_file_that_moves_a_marker_is_refused() -> None:
    moved = PROGRAM.replace("B = -0.75\n# EVOLVE-BLOCK-END\n", "# EVOLVE-BLOCK-END\nB = -0.75\n")
    with pytest.raises(EditError, match="the rewrite moves an EVOLVE-BLOCK marker"):
        apply(f"=== FILE: initial_program.py ===\n```python\n{moved}```\n")
    assert apply(f"=== FILE: initial_program.py ===\n```python\n{CHANGED}```\n") == CHANGED


def test_a_file_with_mixed_endings_keeps_its_crlf_marker_lines() -> None:
    program = PROGRAM.replace("# EVOLVE-BLOCK-START\n", "# EVOLVE-BLOCK-START\r\n")
    out = apply(HEAD + LANDS["both markers"], program)
    assert out == CHANGED.replace("# EVOLVE-BLOCK-START\n", "# EVOLVE-BLOCK-START\r\n")
