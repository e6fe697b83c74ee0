"""The offline mutation agents: seeded code edits, and the curve-fit example end to end."""

from __future__ import annotations

import ast
import io
import json
import random
import tokenize
from pathlib import Path

import pytest

from revtree.agents.base import Job, Proposal
from revtree.agents.knobs import KnobCoder, KnobProposer
from revtree.agents.mutate import MutationCoder, MutationProposer, offline_agents
from revtree.errors import EditError
from revtree.memory import NodeStatus, Store
from revtree.memory.records import Node
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from revtree.tasks.spec import MutateAgent

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "curve-fit"
SRC = b"import math\n\n\ndef f(x):\n    # keep 9.5 here\n    return 2.0 * x + math.cos(3) - 1\n"
BLOCKED = b"LIMIT = 7\n# EVOLVE-BLOCK-START\ndef f(x):\n    return 0.5 * x\n# EVOLVE-BLOCK-END\n"
CFG = MutateAgent(swaps=(("+", "-"), ("*", "/"), ("sin", "cos")))


def plan(node_id: int, operator: str = "improve", seed: int = 3) -> Proposal:
    parent = Node("r", 0, None, "baseline", NodeStatus.SUCCEEDED)
    return MutationProposer(seed, CFG).ask(node_id, parent, operator)


def mutated(coder: MutationCoder, proposal: Proposal, src: bytes = SRC) -> str:
    return (coder.write(proposal, {"a.py": src}).get("a.py") or src).decode()


def split(text: str) -> tuple[list[str], list[str]]:
    """(number tokens, other tokens) of a source text, comments left out."""
    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    numbers = [t.string for t in toks if t.type == tokenize.NUMBER]
    others = [t.string for t in toks if t.type not in (tokenize.NUMBER, tokenize.COMMENT)]
    return numbers, others


def test_the_same_plan_gives_the_same_edit_and_others_differ() -> None:
    coder = MutationCoder(["*.py"], CFG)
    assert mutated(coder, plan(1)) == mutated(coder, plan(1)) != SRC.decode()
    outs = {mutated(coder, plan(i)) for i in range(1, 30)}
    assert len(outs) > 10


def test_mutations_keep_the_code_parsable_and_the_comments() -> None:
    coder = MutationCoder(["*.py"], CFG)
    for i in range(1, 60):
        new = mutated(coder, plan(i, "draft"))
        ast.parse(new)
        assert "# keep 9.5 here" in new and new.startswith("import math\n")


def test_tune_changes_only_numbers_and_debug_one_token() -> None:
    coder = MutationCoder(["*.py"], CFG)
    numbers, others = split(SRC.decode())
    tuned_numbers = set()
    for i in range(1, 20):
        tuned, fixed = (
            split(mutated(coder, plan(i, "tune"))),
            split(mutated(coder, plan(i, "debug"))),
        )
        assert tuned[1] == others
        tuned_numbers.add(tuple(tuned[0]))
        changed = sum(x != y for x, y in zip(fixed[0] + fixed[1], numbers + others, strict=True))
        assert changed == 1
    assert len(tuned_numbers) > 5


def job(node_id: int, operator: str, files: dict[str, bytes], parent: Node | None = None) -> Job:
    parent = parent or Node("r", 0, None, "baseline", NodeStatus.SUCCEEDED)
    return Job(Node("r", node_id, parent.id, operator, NodeStatus.PENDING), parent, lambda: files)


def finished(node_id: int, proposal: Proposal, ok: bool) -> Node:
    status = NodeStatus.SUCCEEDED if ok else NodeStatus.FAILED
    return Node(
        "r", node_id, 0, "improve", status, proposal=proposal.to_json(),
        error_kind=None if ok else "crash",
    )  # fmt: skip


PROGRAM = b"""\
import math

STEPS = 40
RATE = 0.5


def run(xs, limit=3.0):
    total = 0.0
    for i in range(1, STEPS):
        x = xs[i - 1] * RATE + math.cos(i * 0.1)
        if x > limit:
            total = total + x / 2
    return total
"""


def test_number_sites_are_named_by_their_place_in_the_code() -> None:
    coder = MutationCoder(["*.py"], MutateAgent())
    kinds = {(s.text, s.kind) for s in coder.sites("p.py", PROGRAM.decode())}
    assert {
        ("40", "constant"),
        ("0.5", "constant"),
        ("3.0", "setting"),
        ("0.0", "setting"),
    } <= kinds
    assert ("1", "bound") in kinds and not any(t == "STEPS" for t, _ in kinds)
    assert (
        ("1", "integer") in kinds and ("0.1", "coefficient") in kinds and ("2", "integer") in kinds
    )
    assert {s.kind for s in coder.sites("p.py", "if n > 10:\n    pass\n")} == {"threshold", "swap"}


def test_ints_that_set_a_value_are_scaled_and_stay_positive() -> None:
    coder = MutationCoder(["*.py"], MutateAgent())
    steps = next(s for s in coder.sites("p.py", PROGRAM.decode()) if s.text == "40")
    values = {int(coder.mutate(steps, random.Random(i))) for i in range(200)}
    assert min(values) >= 1 and max(values) > 44 and 40 not in values and len(values) > 20
    start = next(s for s in coder.sites("p.py", PROGRAM.decode()) if s.kind == "bound")
    assert {int(coder.mutate(start, random.Random(i))) for i in range(50)} <= {2, 3}


def test_the_proposer_prefers_values_and_learns_what_broke_the_program() -> None:
    cfg = MutateAgent()
    files = {"p.py": PROGRAM}
    fresh = MutationProposer(5, cfg, ["*.py"])
    first = [json.loads(fresh.propose(job(i, "improve", files)).plan) for i in range(1, 41)]
    kinds = [s["kind"] for p in first for s in p["sites"]]
    assert kinds.count("swap") < len(kinds) / 4  # values first, swaps seldom
    assert kinds.count("constant") > kinds.count("integer")

    learner = MutationProposer(5, cfg, ["*.py"])
    history = []
    for i in range(1, 31):  # every swap crashes, every other change runs
        proposal = learner.propose(job(i, "improve", files))
        swapped = any(s["kind"] == "swap" for s in json.loads(proposal.plan)["sites"])
        node = finished(i, proposal, ok=not swapped)
        learner.observe(node)
        history.append(node)
    assert learner.weights()["swap"] < fresh.weights()["swap"] * 0.75
    assert learner.weights()["constant"] > fresh.weights()["constant"]
    later = [json.loads(learner.propose(job(i, "improve", files)).plan) for i in range(41, 81)]
    assert sum(s["kind"] == "swap" for p in later for s in p["sites"]) < kinds.count("swap")

    rebuilt = MutationProposer(5, cfg, ["*.py"])
    rebuilt.rebuild(reversed(history))  # a resumed run: the same finished history
    assert rebuilt.propose(job(99, "improve", files)) == learner.propose(job(99, "improve", files))


def tokens(text: bytes) -> list[str]:
    return [t.string for t in tokenize.generate_tokens(io.StringIO(text.decode()).readline)]


def test_debug_undoes_all_but_the_least_suspect_change_of_the_failed_parent() -> None:
    cfg = MutateAgent()
    coder, undone = MutationCoder(["*.py"], cfg), 0
    for node_id in range(1, 8):
        proposer = MutationProposer(2, cfg, ["*.py"])  # a run that saw only this failure
        draft = proposer.propose(job(node_id, "draft", {"p.py": PROGRAM}))
        broken = coder.write(draft, {"p.py": PROGRAM})["p.py"]
        assert broken is not None
        parent = finished(node_id, draft, ok=False)
        proposer.observe(parent)
        fix = proposer.propose(job(100 + node_id, "debug", {"p.py": broken}, parent))
        fixed = coder.write(fix, {"p.py": broken})["p.py"] or broken
        changed = {
            i
            for i, (a, b) in enumerate(zip(tokens(broken), tokens(PROGRAM), strict=True))
            if a != b
        }
        left = {
            i for i, (a, b) in enumerate(zip(tokens(fixed), tokens(PROGRAM), strict=True)) if a != b
        }
        kinds = {s["key"]: s["kind"] for s in json.loads(draft.plan)["sites"]}
        if len(kinds) > 1:  # all but one change undone, nothing new
            assert len(left) == 1 and left < changed
            assert f"undo {len(kinds) - 1} of node {node_id}'s changes" in fix.hypothesis
            kept = tokens(fixed)[left.pop()]
            assert kept[0].isdigit() or set(kinds.values()) == {"swap"}  # a swap goes first
            undone += 1
        else:  # the only change undone and one new edit elsewhere
            assert len(left) == 1 and left != changed
    assert undone >= 3


def test_only_editable_files_and_evolve_blocks_change() -> None:
    coder = MutationCoder(["b.py"], CFG)
    files = {"a.py": SRC, "b.py": BLOCKED, "c.txt": b"1 + 2"}
    for i in range(1, 20):
        changes = coder.write(plan(i), files)
        assert set(changes) <= {"b.py"}
        new = (changes.get("b.py") or BLOCKED).decode()
        assert new.startswith("LIMIT = 7\n# EVOLVE-BLOCK-START\n")


def test_nothing_to_mutate_and_a_bad_plan_are_edit_errors() -> None:
    coder = MutationCoder(["*.py"], CFG)
    with pytest.raises(EditError, match="nothing to mutate"):
        coder.write(plan(1), {"a.py": b"x = 'text'\n"})
    with pytest.raises(EditError, match="not a mutation plan"):
        coder.write(Proposal("h", plan="{"), {"a.py": SRC})


def test_the_mode_selects_the_offline_agents() -> None:
    spec = load_task(EXAMPLE)
    mutation = offline_agents(spec)
    assert isinstance(mutation[0], MutationProposer) and isinstance(mutation[1], MutationCoder)
    knobs = offline_agents(spec.with_overrides(agents={"mode": "knobs"}))
    assert isinstance(knobs[0], KnobProposer) and isinstance(knobs[1], KnobCoder)


@pytest.mark.slow  # a whole run
def test_curve_fit_runs_end_to_end(tmp_path: Path) -> None:
    spec = load_task(EXAMPLE).with_overrides(
        budget={"max_nodes": 8}, sandbox={"backend": "local"}, search={"seed": 4}
    )
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        run = create_run(store, spec, tmp_path)
        orch = Orchestrator(store, run.id, home=tmp_path)
        orch.drive()
        nodes = store.nodes(run.id)
    finally:
        store.close()
    assert len(nodes) == 8 and all(n.status.is_finished() for n in nodes)
    assert nodes[0].score == pytest.approx(1.026212)
    scores = {n.score for n in nodes[1:] if n.status is NodeStatus.SUCCEEDED}
    assert scores and scores != {nodes[0].score}


def test_a_swap_group_needs_two_different_tokens() -> None:
    with pytest.raises(ValueError, match="at least two different tokens"):
        MutateAgent(swaps=(("+", "+"),))


def test_only_binary_operators_are_swapped_never_an_unpacking_star_or_a_sign() -> None:
    from revtree.agents.mutate import MutationCoder
    from revtree.tasks.spec import MutateAgent

    coder = MutationCoder(["p.py"], MutateAgent())
    src = "def f(bounds, a):\n    y = random.uniform(*bounds) * 2\n    return -a + f(**d) - 1\n"
    swaps = [s for s in coder.sites("p.py", src) if s.kind == "swap"]
    assert [(s.text, src[s.start - 2 : s.start]) for s in swaps] == [
        ("*", ") "),
        ("+", "a "),
        ("-", ") "),
    ]
