"""The offline mutation agents: seeded code edits, and the curve-fit example end to end."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

from revtree.agents.base import Proposal
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


def test_tune_changes_only_numbers_and_debug_only_tokens() -> None:
    coder = MutationCoder(["*.py"], CFG)
    numbers, others = split(SRC.decode())
    tuned_numbers, fixed_others = set(), set()
    for i in range(1, 20):
        tuned, fixed = (
            split(mutated(coder, plan(i, "tune"))),
            split(mutated(coder, plan(i, "debug"))),
        )
        assert tuned[1] == others and fixed[0] == numbers
        tuned_numbers.add(tuple(tuned[0]))
        fixed_others.add(tuple(fixed[1]))
    assert len(tuned_numbers) > 5 and len(fixed_others) > 2


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
