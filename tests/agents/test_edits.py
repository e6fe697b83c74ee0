"""Parsing and applying LLM edits: scope, EVOLVE-BLOCK regions, repairs named precisely."""

from __future__ import annotations

import pytest

from revtree.agents.edits import apply_edits, parse_edits
from revtree.errors import EditError

FILES = {
    "src/m.py": b"x = 1\n# EVOLVE-BLOCK-START\ndef f():\n    return 1\n# EVOLVE-BLOCK-END\ny = 2\n",
    "b.py": b"z = 3   \nw = 4\n",
    "ev.py": b"print(1)\n",
}
EDITABLE = ("src/*.py", "b.py")


def block(path: str, search: str, replace: str) -> str:
    return f"{path}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def apply(answer: str) -> dict[str, bytes]:
    return apply_edits(parse_edits(answer), FILES, EDITABLE)


def test_blocks_across_files_inside_the_evolve_block() -> None:
    out = apply(
        "intro\n"
        + block("src/m.py", "    return 1\n", "    return 2\n")
        + "```\n"
        + block("b.py", "w = 4\n", "w = 5\n")
        + "```\n"
    )
    assert out["src/m.py"] == FILES["src/m.py"].replace(b"return 1", b"return 2")
    assert out["b.py"] == b"z = 3   \nw = 5\n"


def test_trailing_white_space_is_tolerated_in_search() -> None:
    assert apply(block("b.py", "z = 3\n", "z = 9\n"))["b.py"] == b"z = 9\nw = 4\n"


def test_whole_file_rewrite_and_new_file() -> None:
    out = apply("=== FILE: b.py ===\n```python\nz = 0\n```\n" + block("src/new.py", "", "k = 1\n"))
    assert out == {"b.py": b"z = 0\n", "src/new.py": b"k = 1\n"}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("", "the answer is empty"),
        ("I would change z.", "no edits found"),
        ("b.py\n<<<<<<< SEARCH\nz = 3\n>>>>>>> REPLACE\n", "malformed edit blocks"),
        (block("ev.py", "print(1)\n", "print(0)\n"), "'ev.py' is not editable"),
        (block("src/m.py", "x = 1\n", "x = 5\n"), "outside the EVOLVE-BLOCK regions"),
        (block("src/m.py", "nothing like this\n", "x\n"), "does not match 'src/m.py'"),
        (block("b.py", "", "z = 1\n"), "an empty SEARCH only creates a new file"),
        (block("../etc/passwd", "a\n", "b\n"), "must be relative"),
        (block("src//m.py", "", "x = 0\n"), "write the path plainly"),
        (block("src/./m.py", "", "x = 0\n"), "write the path plainly"),
        (
            block(
                "src/m.py",
                "    return 1\n",
                "    return 1\n# EVOLVE-BLOCK-END\nx = 7\n# EVOLVE-BLOCK-START\n",
            ),
            "may not add or move EVOLVE-BLOCK markers",
        ),
        ("=== FILE: src/m.py ===\n```python\nx = 1\n```\n", "outside the EVOLVE-BLOCK"),
    ],
)
def test_refusals_say_what_is_wrong(answer: str, message: str) -> None:
    with pytest.raises(EditError, match=message):
        apply(answer)
