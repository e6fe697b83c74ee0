"""The knob coder (values rewritten in place) and the seeded Optuna knob proposer."""

from __future__ import annotations

import math

import pytest

from revtree.agents import KnobCoder, KnobProposer, Proposal, read_knobs
from revtree.errors import EditError
from revtree.memory.records import Node, NodeStatus
from revtree.tasks.spec import Knob

SOLVER = '''\
"""A solver with knobs."""
import math

LR_SCHEDULE = "cosine"
LR = 0.01  # learning rate
BATCH: int = 32
MODE = "fast"
config = {"width": 128, "depth": 3}
ACTIVATION = "relu"


def run():
    return math.sqrt(LR) * BATCH
'''

KNOBS = [
    Knob(name="lr", type="float", low=1e-4, high=1.0, log=True, file="solver.py", variable="LR"),
    Knob(name="batch", type="int", low=1, high=256, log=True, file="solver.py", variable="BATCH"),
    Knob(
        name="mode", type="categorical", choices=("fast", "slow"), file="solver.py", variable="MODE"
    ),
    Knob(
        name="width",
        type="int",
        low=8,
        high=512,
        step=8,
        file="solver.py",
        pattern=r'"width":\s*(\d+)',
    ),
    Knob(
        name="act",
        type="categorical",
        choices=("relu", "gelu", "tanh"),
        file="solver.py",
        pattern=r'^ACTIVATION = "(\w+)"',
    ),
]
FILES = {"solver.py": SOLVER.encode(), "other.py": b"untouched = 1\n"}


def test_coder_rewrites_values_in_place_and_nothing_else():
    values = {"lr": 0.5, "batch": 64, "mode": "slow", "width": 256, "act": "gelu"}
    changes = KnobCoder(KNOBS).code(Proposal("try", knobs=values), FILES)
    assert list(changes) == ["solver.py"]
    expected = (
        SOLVER.replace("LR = 0.01", "LR = 0.5")
        .replace("BATCH: int = 32", "BATCH: int = 64")
        .replace('MODE = "fast"', "MODE = 'slow'")
        .replace('"width": 128', '"width": 256')
        .replace('ACTIVATION = "relu"', 'ACTIVATION = "gelu"')
    )
    assert changes["solver.py"] == expected.encode()
    assert read_knobs(KNOBS, changes) == values


@pytest.mark.parametrize(
    ("name", "value", "old", "new"),
    [
        ("lr", 0.003, "LR = 0.01  #", "LR = 0.003  #"),
        ("batch", 7, "BATCH: int = 32\n", "BATCH: int = 7\n"),
        ("batch", 7.0, "BATCH: int = 32\n", "BATCH: int = 7\n"),
        ("mode", "slow", 'MODE = "fast"', "MODE = 'slow'"),
        ("width", 64, '{"width": 128,', '{"width": 64,'),
        ("act", "tanh", 'ACTIVATION = "relu"', 'ACTIVATION = "tanh"'),
    ],
    ids=["float", "int", "int-from-float", "categorical", "pattern-int", "pattern-categorical"],
)
def test_coder_changes_one_value_byte_for_byte(name, value, old, new):
    changes = KnobCoder(KNOBS).code(Proposal("one", knobs={name: value}), FILES)
    assert SOLVER.count(old) == 1
    assert changes == {"solver.py": SOLVER.replace(old, new).encode()}
    assert 'LR_SCHEDULE = "cosine"' in changes["solver.py"].decode()  # similar name untouched


def test_coder_returns_nothing_when_values_are_unchanged():
    assert KnobCoder(KNOBS).code(Proposal("same", knobs={"lr": 0.01, "batch": 32}), FILES) == {}


def test_coder_rejects_an_unknown_knob():
    with pytest.raises(EditError, match="unknown knob 'depth'"):
        KnobCoder(KNOBS).code(Proposal("x", knobs={"depth": 4}), FILES)


def test_coder_rejects_a_missing_file_or_location():
    with pytest.raises(EditError, match=r"solver\.py"):
        KnobCoder(KNOBS).code(Proposal("x", knobs={"lr": 0.1}), {"other.py": b""})
    with pytest.raises(EditError, match="location is gone"):
        KnobCoder(KNOBS).code(Proposal("x", knobs={"lr": 0.1}), {"solver.py": b"lr = 1\n"})


def test_read_knobs_reads_the_original_values():
    assert read_knobs(KNOBS, FILES) == {
        "lr": 0.01,
        "batch": 32,
        "mode": "fast",
        "width": 128,
        "act": "relu",
    }
    assert read_knobs(KNOBS, {"solver.py": b"LR = not_a_literal(\n"}) == {}


# -- the proposer ---------------------------------------------------------------------


def objective(knobs: dict) -> float:
    penalty = {"fast": 0.0, "slow": 0.3}[knobs["mode"]] + {"relu": 0, "gelu": 0.1, "tanh": 0.2}[
        knobs["act"]
    ]
    return (
        -((math.log10(knobs["lr"]) + 2) ** 2)
        - abs(knobs["batch"] - 48) / 48
        - abs(knobs["width"] - 200) / 200
        - penalty
    )


ROOT = Node(
    run_id="r", id=0, parent_id=None, operator="root", status=NodeStatus.SUCCEEDED, score=-5.0
)


def proposer(seed: int = 3, sampler: str = "tpe") -> KnobProposer:
    return KnobProposer(KNOBS, maximize=True, seed=seed, sampler=sampler, n_startup_trials=3)


def finish(node_id: int, proposal: Proposal) -> Node:
    """The node as it ends; every fifth one fails, to put failures in the history."""
    failed = node_id % 5 == 0
    return Node(
        run_id="r",
        id=node_id,
        parent_id=0,
        operator="improve",
        status=NodeStatus.FAILED if failed else NodeStatus.SUCCEEDED,
        score=None if failed else objective(proposal.knobs),
        proposal=proposal.to_json(),
    )


def drive(p: KnobProposer, ids: range) -> tuple[list[dict], list[Node]]:
    proposals, nodes = [], []
    for i in ids:
        prop = p.propose(i, ROOT, "improve")
        node = finish(i, prop)
        p.observe(node)
        proposals.append(prop.knobs)
        nodes.append(node)
    return proposals, nodes


def test_same_seed_same_proposals():
    a, _ = drive(proposer(), range(1, 11))
    b, _ = drive(proposer(), range(1, 11))
    assert a == b
    c, _ = drive(proposer(seed=4), range(1, 11))
    assert a != c


def test_rebuilt_proposer_asks_what_the_uninterrupted_one_asks():
    straight = proposer()
    _, history = drive(straight, range(1, 8))
    resumed = proposer()
    resumed.rebuild([ROOT, *reversed(history)])  # any order: rebuild sorts by id
    for node_id in range(8, 12):
        a = straight.propose(node_id, ROOT, "improve")
        b = resumed.propose(node_id, ROOT, "improve")
        assert a == b
        straight.observe(finish(node_id, a))
        resumed.observe(finish(node_id, b))


def test_rebuild_keeps_in_flight_nodes_as_running_trials():
    straight = proposer()
    _, history = drive(straight, range(1, 6))
    in_flight = straight.propose(6, ROOT, "improve")  # asked, never told
    pending = Node(
        run_id="r",
        id=6,
        parent_id=0,
        operator="improve",
        status=NodeStatus.EVALUATING,
        proposal=in_flight.to_json(),
    )
    resumed = proposer()
    resumed.rebuild([*history, pending])
    assert straight.propose(7, ROOT, "improve") == resumed.propose(7, ROOT, "improve")
    done6 = finish(6, in_flight)
    straight.observe(done6)
    resumed.observe(done6)
    assert straight.propose(8, ROOT, "improve") == resumed.propose(8, ROOT, "improve")


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_proposals_stay_within_the_ranges(sampler):
    proposals, _ = drive(proposer(seed=11, sampler=sampler), range(1, 31))
    for knobs in proposals:
        assert set(knobs) == {"lr", "batch", "mode", "width", "act"}
        assert isinstance(knobs["lr"], float) and 1e-4 <= knobs["lr"] <= 1.0
        assert isinstance(knobs["batch"], int) and 1 <= knobs["batch"] <= 256
        assert isinstance(knobs["width"], int) and 8 <= knobs["width"] <= 512
        assert knobs["width"] % 8 == 0
        assert knobs["mode"] in ("fast", "slow") and knobs["act"] in ("relu", "gelu", "tanh")
    assert len({k["lr"] for k in proposals}) > 20  # it explores


def test_proposal_text_names_the_changes_and_codes_cleanly():
    parent = Node(
        run_id="r",
        id=0,
        parent_id=None,
        operator="root",
        status=NodeStatus.SUCCEEDED,
        proposal={"knobs": read_knobs(KNOBS, FILES)},
    )
    prop = proposer().propose(1, parent, "improve")
    assert prop.hypothesis.startswith("improve from node 0:")
    changes = KnobCoder(KNOBS).code(prop, FILES)
    assert read_knobs(KNOBS, changes or FILES) == prop.knobs


def test_proposer_without_knobs_proposes_no_change():
    prop = KnobProposer([], maximize=False, seed=0).propose(1, ROOT, "improve")
    assert prop.knobs == {}
