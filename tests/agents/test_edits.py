"""Parsing and applying LLM edits: scope, EVOLVE-BLOCK regions, repairs named precisely."""

from __future__ import annotations

import pytest

from revtree.agents.edits import apply_edits, parse_edits
from revtree.agents.parsing import parse_proposal, parse_verdict
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
            "adds, removes or changes an EVOLVE-BLOCK marker",
        ),
        (
            "=== FILE: src/m.py ===\n```python\nx = 1\n```\n",
            "removes or changes an EVOLVE-BLOCK marker",
        ),
    ],
)
def test_refusals_say_what_is_wrong(answer: str, message: str) -> None:
    with pytest.raises(EditError, match=message):
        apply(answer)


def test_an_exact_match_in_two_places_is_ambiguous_unless_a_diff_line_breaks_the_tie() -> None:
    files = {"b.py": b"a = 1\nb = 2\na = 1\n"}
    with pytest.raises(EditError, match=r"ambiguous: it matches 2 places .* lines 1, 3"):
        apply_edits(parse_edits(block("b.py", "a = 1\n", "a = 0\n")), files, EDITABLE)
    diff = "```diff\n--- a/b.py\n+++ b/b.py\n@@ -3 +3 @@\n-a = 1\n+a = 0\n```\n"
    assert apply_edits(parse_edits(diff), files, EDITABLE) == {"b.py": b"a = 1\nb = 2\na = 0\n"}


def test_an_indentation_offset_shifts_the_replacement_alike() -> None:
    answer = block("src/m.py", "return 1\n", "if True:\n    return 2\n")
    assert apply(answer)["src/m.py"] == FILES["src/m.py"].replace(
        b"    return 1\n", b"    if True:\n        return 2\n"
    )


def test_a_fuzzy_match_is_refused_below_the_threshold_and_far_files_stay_fast() -> None:
    with pytest.raises(EditError, match="does not match"):
        apply(block("b.py", "q = 3\nr = 4\n", "z = 0\n"))
    big = "".join(f"value_{i} = compute({i}, {i * 7})\n" for i in range(3000)).encode()
    import time

    t0 = time.perf_counter()
    with pytest.raises(EditError):
        apply_edits(
            parse_edits(block("b.py", "nothing\nlike this\n", "x\n")), {"b.py": big}, ["b.py"]
        )
    assert time.perf_counter() - t0 < 5.0


def test_format_flags_still_restrict_the_dialects() -> None:
    whole = "=== FILE: b.py ===\n```python\nz = 0\n```\n"
    with pytest.raises(EditError, match="expected SEARCH/REPLACE blocks exactly"):
        parse_edits(whole, allow_files=False)
    with pytest.raises(EditError, match="expected '=== FILE: path ===' blocks exactly"):
        parse_edits(block("b.py", "w = 4\n", "w = 5\n"), allow_blocks=False)
    with pytest.raises(EditError, match="no edits found"):
        parse_edits("```python\nz = 0\n```\n", allow_files=False)


def test_reasoning_only_is_named() -> None:
    with pytest.raises(EditError, match="only reasoning"):
        parse_edits("<think>\nb.py\n<<<<<<< SEARCH\nw = 4\n=======\nw = 5\n>>>>>>> REPLACE\n")


@pytest.mark.parametrize(
    ("text", "hypothesis", "plan"),
    [
        ("HYPOTHESIS: use a heap\nPLAN:\n1. heapify", "use a heap", "1. heapify"),
        ("**Hypothesis:** use a heap\n\n**Plan:**\n1. heapify", "use a heap", "1. heapify"),
        ("hypothesis: use a heap\nplan: heapify", "use a heap", "heapify"),
        ("I looked closely.\n\n### Hypothesis: use a heap\n", "use a heap", None),
        (
            'Sure! {"hypothesis": "use a heap", "plan": ["heapify", "pop"]}',
            "use a heap",
            "1. heapify\n2. pop",
        ),
        ("<think>hmm</think>HYPOTHESIS: use a heap", "use a heap", None),
        ("Use a heap for the frontier.\nIt is faster.", "Use a heap for the frontier.", None),
    ],
)
def test_proposals_are_read_loosely(text: str, hypothesis: str, plan: str | None) -> None:
    got = parse_proposal(text)
    assert got[0] == hypothesis
    if plan is not None:
        assert got[1] == plan


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("VERDICT: accept\nREASONS: fine", True),
        ("Verdict: Reject.\nReasons: it reads the test data", False),
        ("**Verdict:** **ACCEPT**\n\nThe change is honest.", True),
        ("After reading the diff:\n\nverdict: reject - hard-codes answers", False),
        ('{"verdict": "accept", "reasons": "ok"}', True),
        ('```json\n{"accepted": false, "reason": "patches the evaluator"}\n```', False),
        ("<think>verdict: reject?</think>\nVERDICT: accept", True),
        ("Looks fine to me.", None),
    ],
)
def test_verdicts_are_read_loosely(text: str, verdict: bool | None) -> None:
    got = parse_verdict(text)
    assert (got[0] if got else None) is verdict


_GUARDED = (
    b"# EVOLVE-BLOCK-START\nA = 2.25\n# EVOLVE-BLOCK-END\ndef check():\n    raise SystemExit(1)\n"
)


@pytest.mark.parametrize(
    "replace",
    [
        'A = 2.25\n_ = """\n',  # the code after the region becomes the string's text
        "A = 2.25\n_ = '''\n",
    ],
)
def test_a_string_left_open_in_the_region_cannot_swallow_the_code_after_it(replace: str) -> None:
    answer = f"<<<<<<< SEARCH\nA = 2.25\n=======\n{replace}>>>>>>> REPLACE"
    with pytest.raises(EditError, match="string left open"):
        apply_edits(parse_edits(answer), {"p.py": _GUARDED}, ["p.py"])


def test_a_string_opened_and_closed_in_the_region_lands() -> None:
    answer = '<<<<<<< SEARCH\nA = 2.25\n=======\nA = float("""\n3.5""")\n>>>>>>> REPLACE'
    out = apply_edits(parse_edits(answer), {"p.py": _GUARDED}, ["p.py"])
    assert b'A = float("""\n3.5""")\n# EVOLVE-BLOCK-END\ndef check' in out["p.py"]


def test_markers_in_a_file_python_cannot_read_are_checked_as_text() -> None:
    c = b"int a;\n// EVOLVE-BLOCK-START\nint b = 1;\n// EVOLVE-BLOCK-END\nint c;\n"
    answer = "<<<<<<< SEARCH\nint b = 1;\n=======\nint b = 2; /* '''\n>>>>>>> REPLACE"
    assert apply_edits(parse_edits(answer), {"m.c": c}, ["m.c"])["m.c"].count(b"EVOLVE") == 2
