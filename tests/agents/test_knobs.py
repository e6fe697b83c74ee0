"""The knob coder (values rewritten in place) and the seeded Optuna knob proposer."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from revtree.agents import KnobCoder, KnobProposer, Proposal, read_knobs
from revtree.errors import EditError
from revtree.memory import RunStatus, Store
from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from revtree.tasks.spec import Knob, KnobAgent
from tests.orchestrator.conftest import make_task
from tests.orchestrator.test_run import StopsAt

SOLVER = '''\
"""A solver with knobs."""
import dataclasses
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
    changes = KnobCoder(KNOBS).write(Proposal("try", knobs=values), FILES)
    assert list(changes) == ["solver.py"]
    expected = (
        SOLVER.replace("LR = 0.01  #", "LR = 0.5   #")  # the comment keeps its column
        .replace("BATCH: int = 32", "BATCH: int = 64")
        .replace('MODE = "fast"', 'MODE = "slow"')
        .replace('"width": 128', '"width": 256')
        .replace('ACTIVATION = "relu"', 'ACTIVATION = "gelu"')
    )
    assert changes["solver.py"] == expected.encode()
    assert read_knobs(KNOBS, changes) == values


@pytest.mark.parametrize(
    ("name", "value", "old", "new"),
    [
        ("lr", 0.003, "LR = 0.01  #", "LR = 0.003  #"),  # two spaces kept
        ("batch", 7, "BATCH: int = 32\n", "BATCH: int = 7\n"),
        ("batch", 7.0, "BATCH: int = 32\n", "BATCH: int = 7\n"),
        ("mode", "slow", 'MODE = "fast"', 'MODE = "slow"'),
        ("width", 64, '{"width": 128,', '{"width": 64,'),
        ("act", "tanh", 'ACTIVATION = "relu"', 'ACTIVATION = "tanh"'),
    ],
    ids=["float", "int", "int-from-float", "categorical", "pattern-int", "pattern-categorical"],
)
def test_coder_changes_one_value_byte_for_byte(name, value, old, new):
    changes = KnobCoder(KNOBS).write(Proposal("one", knobs={name: value}), FILES)
    assert SOLVER.count(old) == 1
    assert changes == {"solver.py": SOLVER.replace(old, new).encode()}
    assert 'LR_SCHEDULE = "cosine"' in changes["solver.py"].decode()  # similar name untouched


def test_coder_returns_nothing_when_values_are_unchanged():
    assert KnobCoder(KNOBS).write(Proposal("same", knobs={"lr": 0.01, "batch": 32}), FILES) == {}


def test_coder_rejects_an_unknown_knob():
    with pytest.raises(EditError, match="unknown knob 'depth'"):
        KnobCoder(KNOBS).write(Proposal("x", knobs={"depth": 4}), FILES)


def test_coder_rejects_a_missing_file_or_location():
    with pytest.raises(EditError, match=r"solver\.py"):
        KnobCoder(KNOBS).write(Proposal("x", knobs={"lr": 0.1}), {"other.py": b""})
    with pytest.raises(EditError, match="location is gone"):
        KnobCoder(KNOBS).write(Proposal("x", knobs={"lr": 0.1}), {"solver.py": b"lr = 1\n"})


INIT = Knob(
    name="init",
    type="categorical",
    choices=("random", "zeros", "it's"),
    file="s.py",
    variable="INIT",
)


@pytest.mark.parametrize(
    ("knob", "text", "value"),
    [
        (INIT, 'INIT = "random"  # how to start\n', "random"),
        (INIT, "INIT = 'random'\n", "random"),
        (INIT, "INIT = r'random'\n", "random"),
        (KNOBS[0], "LR = 1e-3\n", 0.001),
        (KNOBS[0], "LR = 1\n", 1.0),
        (KNOBS[1], "BATCH = 0x20\n", 32),
    ],
    ids=["double-quoted", "single-quoted", "raw-string", "exponent", "int-for-float", "hex"],
)
def test_coder_leaves_a_value_the_file_already_holds_untouched(knob, text, value):
    """Issue #14: an unchanged value was rewritten ('"random"' became "'random'"), so an
    exported patch carried spurious changes."""
    files = {knob.file: text.encode()}
    assert KnobCoder([knob]).write(Proposal("same", knobs={knob.name: value}), files) == {}


@pytest.mark.parametrize(
    ("text", "value", "expected"),
    [
        ('INIT = "random"\n', "zeros", 'INIT = "zeros"\n'),
        ("INIT = 'random'\n", "zeros", "INIT = 'zeros'\n"),
        ('INIT = "random"\n', "it's", 'INIT = "it\'s"\n'),
        ("INIT = 'random'\n", "it's", "INIT = 'it\\'s'\n"),
        ("INIT = None\n", "zeros", "INIT = 'zeros'\n"),
    ],
    ids=["double", "single", "double-with-quote", "single-with-quote", "not-a-string"],
)
def test_coder_writes_a_string_in_the_quotes_of_the_file(text, value, expected):
    changes = KnobCoder([INIT]).write(Proposal("q", knobs={"init": value}), {"s.py": text.encode()})
    assert changes == {"s.py": expected.encode()}
    assert read_knobs([INIT], changes) == {"init": value}


def test_coder_names_a_file_that_is_not_utf8():
    files = {"s.py": "# caf\xe9\nINIT = 'random'\n".encode("latin-1")}
    with pytest.raises(EditError, match=r"'s\.py' is not UTF-8"):
        KnobCoder([INIT]).write(Proposal("x", knobs={"init": "zeros"}), files)


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
        prop = p.ask(i, ROOT, "improve")
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
        a = straight.ask(node_id, ROOT, "improve")
        b = resumed.ask(node_id, ROOT, "improve")
        assert a == b
        straight.observe(finish(node_id, a))
        resumed.observe(finish(node_id, b))


def test_rebuild_keeps_in_flight_nodes_as_running_trials():
    straight = proposer()
    _, history = drive(straight, range(1, 6))
    in_flight = straight.ask(6, ROOT, "improve")  # asked, never told
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
    assert straight.ask(7, ROOT, "improve") == resumed.ask(7, ROOT, "improve")
    done6 = finish(6, in_flight)
    straight.observe(done6)
    resumed.observe(done6)
    assert straight.ask(8, ROOT, "improve") == resumed.ask(8, ROOT, "improve")


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
    prop = proposer().ask(1, parent, "improve")
    assert prop.hypothesis.startswith("improve from node 0:")
    changes = KnobCoder(KNOBS).write(prop, FILES)
    assert read_knobs(KNOBS, changes or FILES) == prop.knobs


def test_proposer_without_knobs_proposes_no_change():
    prop = KnobProposer([], maximize=False, seed=0).ask(1, ROOT, "improve")
    assert prop.knobs == {}


# -- the local sampler ----------------------------------------------------------------

EDGES = [
    Knob(name="pair", type="int", low=1, high=2, file="solver.py"),
    Knob(name="grid", type="float", low=0.0, high=1.0, step=0.25, file="solver.py"),
    Knob(name="one", type="categorical", choices=("only",), file="solver.py"),
    Knob(name="single", type="int", low=0, high=1, step=2, file="solver.py"),  # just 0
]
ONE_VALUE = pytest.mark.filterwarnings("ignore:The distribution is specified by:UserWarning")
ALL = KNOBS + EDGES
SPANS = {  # a numeric knob's range in the sampler's internal space
    "lr": (math.log(1e-4), 0.0),
    "batch": (0.0, math.log(256)),
    "width": (8.0, 512.0),
    "pair": (1.0, 2.0),
    "grid": (0.0, 1.0),
}
MID = {"lr": 0.01, "batch": 16, "mode": "fast", "width": 256, "act": "gelu"}


def internal(name: str, value: float) -> float:
    return math.log(value) if name in ("lr", "batch") else float(value)


def distance(a: dict, b: dict) -> float:
    """Root-mean-square distance over the numeric knobs, each range scaled to [0, 1]."""
    d = [
        (internal(k, a[k]) - internal(k, b[k])) / (hi - lo)
        for k, (lo, hi) in SPANS.items()
        if k in a
    ]
    return math.sqrt(sum(x * x for x in d) / len(d))


def node(node_id: int, knobs: dict, parent_id: int = 0, op: str = "improve") -> Node:
    return Node(
        run_id="r",
        id=node_id,
        parent_id=parent_id,
        operator=op,
        status=NodeStatus.SUCCEEDED,
        score=0.0,
        proposal=Proposal("p", knobs=knobs).to_json(),
    )


def local(seed: int = 3, knobs: list[Knob] = KNOBS, **kw) -> KnobProposer:
    return KnobProposer(knobs, maximize=True, seed=seed, sampler="local", n_startup_trials=3, **kw)


def in_range(knobs: dict) -> None:
    """Each value (of the knobs in ``knobs``) is of its type, in its range, on its grid."""
    expect = {
        "lr": lambda v: isinstance(v, float) and 1e-4 <= v <= 1.0,
        "batch": lambda v: isinstance(v, int) and 1 <= v <= 256,
        "width": lambda v: isinstance(v, int) and 8 <= v <= 512 and v % 8 == 0,
        "mode": lambda v: v in ("fast", "slow"),
        "act": lambda v: v in ("relu", "gelu", "tanh"),
        "pair": lambda v: isinstance(v, int) and v in (1, 2),
        "grid": lambda v: isinstance(v, float) and v in (0.0, 0.25, 0.5, 0.75, 1.0),
        "one": lambda v: v == "only",
        "single": lambda v: v == 0,
    }
    for name, value in knobs.items():
        assert expect[name](value), (name, value)


PARENTS = [  # the middle, then the low and the high end of every range
    {**MID, "pair": 1, "grid": 0.5, "one": "only", "single": 0},
    {"lr": 1e-4, "batch": 1, "mode": "fast", "width": 8, "act": "relu", "pair": 1, "grid": 0.0},
    {"lr": 1.0, "batch": 256, "mode": "slow", "width": 512, "act": "tanh", "pair": 2, "grid": 1.0},
]


@pytest.mark.parametrize("share", [0.01, 0.3, 1.0])
@pytest.mark.parametrize("parent", PARENTS, ids=["middle", "low", "high"])
@ONE_VALUE
def test_local_proposals_stay_in_range_and_differ_from_the_parent(parent, share):
    p = local(knobs=ALL, local_share=share, local_scale=0.3)
    for i in range(1, 61):
        knobs = p.ask(i, node(0, parent), "improve").knobs
        assert set(knobs) == {k.name for k in ALL}
        in_range(knobs)
        assert {k: v for k, v in knobs.items() if k in parent} != parent


@ONE_VALUE
def test_local_moves_each_kind_of_knob_and_only_some_at_a_time():
    p = local(knobs=ALL, local_share=0.3)
    start = PARENTS[0]
    moved = {k.name: 0 for k in ALL}
    for i in range(1, 401):
        knobs = p.ask(i, node(0, start), "debug").knobs
        for k, v in knobs.items():
            moved[k] += v != start[k]
    assert moved["one"] == moved["single"] == 0  # cannot change
    for name in ("lr", "batch", "mode", "width", "act", "pair", "grid"):
        assert 0.2 * 400 < moved[name] < 0.5 * 400, (name, moved[name])  # local_share 0.3


@pytest.mark.parametrize("operator", ["improve", "debug", "crossover"])
def test_local_proposals_are_near_the_parent(operator):
    parent = node(0, MID)
    near = local(seed=5)
    far = proposer(seed=5, sampler="tpe")
    d_local, d_global = [], []
    for i in range(1, 81):
        d_local.append(distance(near.ask(i, parent, operator).knobs, MID))
        d_global.append(distance(far.ask(i, parent, operator).knobs, MID))
    median = sorted(d_local)[40]  # about 0.09 against 0.31
    assert 0 < median < 0.5 * sorted(d_global)[40]
    assert max(d_local) < 0.6


def test_local_scale_sets_the_size_of_a_step():
    parent = node(0, MID)
    medians = []
    for scale in (0.03, 0.1, 0.3):
        p = local(local_scale=scale, local_share=1.0)
        d = sorted(distance(p.ask(i, parent, "improve").knobs, MID) for i in range(1, 61))
        medians.append(d[30])
    assert medians[0] < 0.5 * medians[1] < 0.25 * medians[2]


def test_local_proposals_are_seeded_by_run_seed_and_node_id_only():
    parent = node(4, MID)
    a = [local().ask(i, parent, "improve").knobs for i in range(5, 25)]
    assert a == [local().ask(i, parent, "improve").knobs for i in range(5, 25)]
    assert a != [local(seed=4).ask(i, parent, "improve").knobs for i in range(5, 25)]
    assert len({str(k) for k in a}) > len(a) // 2  # each node its own move
    busy = local()
    drive(busy, range(1, 5))  # a history in the study does not change a local move
    assert busy.ask(5, parent, "improve").knobs == a[0]


def test_local_drafts_and_tunes_ask_the_study_as_tpe_does():
    straight, near = proposer(), local()
    for i in range(1, 9):
        op = "draft" if i % 2 else "tune"
        a, b = straight.ask(i, ROOT, op), near.ask(i, ROOT, op)
        assert a == b
        straight.observe(finish(i, a))
        near.observe(finish(i, b))
    parent = finish(8, b)
    a, b = straight.ask(9, parent, "improve"), near.ask(9, parent, "improve")
    assert distance(b.knobs, parent.proposal["knobs"]) < distance(a.knobs, parent.proposal["knobs"])


def local_history(p: KnobProposer, ids: range) -> list[Node]:
    """Drafts from the root, then improves/debugs of earlier nodes, as a run would."""
    nodes: list[Node] = [node(0, {}, parent_id=None, op="root")]
    for i in ids:
        op = "draft" if i <= 3 else ("debug" if i % 4 == 0 else "improve")
        parent = nodes[0] if op == "draft" else nodes[-1 - i % 3]
        prop = p.ask(i, parent, op)
        done = finish(i, prop)
        p.observe(done)
        nodes.append(done)
    return nodes[1:]


def state(p: KnobProposer) -> list[tuple]:
    return [(t.params, t.values, t.state) for t in p.study.trials]


def test_a_rebuilt_local_proposer_equals_the_live_one():
    live = local()
    history = local_history(live, range(1, 13))
    in_flight = live.ask(13, history[-1], "improve")  # proposed, not yet finished
    pending = dataclasses.replace(
        history[-1], id=13, status=NodeStatus.EVALUATING, score=None, proposal=in_flight.to_json()
    )
    resumed = local()
    resumed.rebuild([ROOT, *reversed(history), pending])
    assert state(resumed) == state(live)
    assert [t.number for t in resumed.study.trials] == [t.number for t in live.study.trials]
    for p in (live, resumed):
        p.observe(finish(13, in_flight))
    assert state(resumed) == state(live)
    assert state(live)[12][1] == [objective(in_flight.knobs)]  # the local move was told
    for i, op in [(14, "draft"), (15, "improve"), (16, "draft")]:
        a, b = live.ask(i, history[5], op), resumed.ask(i, history[5], op)
        assert a == b
        live.observe(finish(i, a))
        resumed.observe(finish(i, b))
    assert state(resumed) == state(live)


def test_local_from_the_root_starts_at_the_baseline_values():
    base = read_knobs(KNOBS, FILES)
    p = local(baseline=base)
    moves = [p.ask(i, ROOT, "improve").knobs for i in range(1, 41)]
    assert sorted(distance(m, base) for m in moves)[20] < 0.1
    prop = local(baseline=base).ask(1, ROOT, "improve")
    assert prop.hypothesis.count("->") == sum(prop.knobs[k] != base[k] for k in base) >= 1
    # no baseline: missing values are drawn over the whole range
    far = [local().ask(i, ROOT, "improve").knobs for i in range(1, 41)]
    assert sorted(distance(m, base) for m in far)[20] > 0.15
    for knobs in far:
        in_range(knobs)


def test_out_of_range_parent_values_are_clipped_first():
    wild = {"lr": 50.0, "batch": 0, "mode": "medium", "width": 1000, "act": "relu"}
    for i in range(1, 21):
        knobs = local(local_scale=0.01).ask(i, node(0, wild), "improve").knobs
        in_range(knobs)
        assert knobs["lr"] > 0.8 and knobs["batch"] <= 2 and knobs["width"] >= 480


def test_from_config_takes_the_task_settings():
    cfg = KnobAgent(sampler="local", local_scale=0.2, local_share=0.5, n_startup_trials=2)
    p = KnobProposer.from_config(KNOBS, True, 9, cfg, baseline={"lr": 0.1})
    assert (p.sampler_name, p.local_scale, p.local_share, p.n_startup) == ("local", 0.2, 0.5, 2)
    assert p.baseline == {"lr": 0.1}
    with pytest.raises(ValueError, match="local_share"):
        KnobAgent(local_share=0)
    with pytest.raises(ValueError, match="sampler"):
        KnobAgent(sampler="nearby")


# -- a real run with the local sampler --------------------------------------------------

LOCAL = 'agents = { knobs = { sampler = "local", local_scale = 0.1 } }'


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REVTREE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("REVTREE_DB", raising=False)
    return tmp_path / "home"


@pytest.fixture
def store(home: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{home / 'revtree.db'}")
    yield s
    s.close()


def run_task(store: Store, home: Path, task: Path, stop_at: int | None = None) -> Orchestrator:
    """A run of ``task``; ``stop_at``: a user's stop as node ``stop_at`` is proposed."""
    run = create_run(store, load_task(task), home)
    orch, stop = Orchestrator(store, run.id, home=home), threading.Event()
    if stop_at is not None:
        orch.agents.proposer = StopsAt(orch.agents.proposer, stop_at, stop)  # type: ignore[assignment]
    orch.drive(stop)
    return orch


@pytest.mark.slow  # a whole run, 4.5 s (issue 24)
def test_a_local_run_improves_near_each_parent(tmp_path: Path, home: Path, store: Store) -> None:
    orch = run_task(store, home, make_task(tmp_path / "t", budget=16, extra=LOCAL))
    root = {"X": 3.0, "N": 2}  # make_task's sol.py; knobs X in [-5, 5], N in [1, 10]
    assert orch.agents.proposer.baseline == root  # an improve of the root starts there
    assert (orch.agents.proposer.sampler_name, orch.agents.proposer.local_scale) == ("local", 0.1)
    nodes = {n.id: n for n in store.nodes(orch.run_id)}
    knobs = {i: (n.proposal or {}).get("knobs") or root for i, n in nodes.items()}
    steps = []
    for n in nodes.values():
        if n.operator in ("improve", "debug"):
            before, after = knobs[n.parent_id], knobs[n.id]
            assert after != before
            steps.append(max(abs(after["X"] - before["X"]) / 10, abs(after["N"] - before["N"]) / 9))
    assert len(steps) >= 10
    assert max(steps) < 0.5 and sorted(steps)[len(steps) // 2] < 0.15
    assert any(n.operator == "draft" for n in nodes.values())


@pytest.mark.slow  # three whole runs
def test_a_resumed_local_run_proposes_as_the_uninterrupted_one(
    tmp_path: Path, home: Path, store: Store
) -> None:
    def tree(run_id: str) -> list[tuple]:
        return [
            (n.id, n.parent_id, n.operator, (n.proposal or {}).get("knobs"))
            for n in store.nodes(run_id)
        ]

    straight = tree(run_task(store, home, make_task(tmp_path / "a", budget=9, extra=LOCAL)).run_id)
    task = make_task(tmp_path / "b", budget=9, extra=LOCAL)
    run_id = run_task(store, home, task, stop_at=5).run_id
    assert not all(n.status.is_finished() for n in store.nodes(run_id))  # stopped mid-run
    store.update_run(run_id, status=RunStatus.STOPPED)
    Orchestrator(store, run_id, home=home).drive()
    assert tree(run_id) == straight
    assert sum(op in ("improve", "debug") for _, _, op, _ in straight) >= 4


def test_sampled_floats_are_written_short_and_comments_keep_their_column() -> None:
    """Issue 26: ``SORT_POWER = 0.4697358999576485`` broke the user's aligned comments."""
    knobs = [
        Knob(name="p", type="float", low=0.0, high=1.0, file="s.py", variable="SORT_POWER"),
        Knob(name="t", type="float", low=1e-5, high=1.0, log=True, file="s.py", variable="TEMP"),
        Knob(name="c", type="float", low=0.999, high=0.9999, file="s.py", variable="COOL"),
    ]
    text = (
        "SORT_POWER = 0.5      # power\nTEMP = 0.01           # temp\n"
        "COOL = 0.9995         # cool\n"
    )
    proposer = KnobProposer(knobs, maximize=False, seed=3)
    for node_id in range(1, 9):
        proposal = proposer.ask(node_id, ROOT, "draft")
        written = KnobCoder(knobs).write(proposal, {"s.py": text.encode()})["s.py"].decode()
        assert [line.index("#") for line in written.splitlines()] == [22, 22, 22], written
        assert read_knobs(knobs, {"s.py": written.encode()}) == proposal.knobs
        for name, value in proposal.knobs.items():
            digits = repr(value).replace(".", "").lstrip("0")
            # the cooling rate's narrow range needs more digits than the others
            assert len(digits) <= (8 if name == "c" else 4), (name, value)


def test_a_twin_refused_unevaluated_teaches_the_study_the_score_of_its_values():
    from revtree.memory.records import TWIN

    p = proposer()
    _, history = drive(p, range(1, 5))
    done = next(n for n in history if n.status is NodeStatus.SUCCEEDED)
    repeat = Proposal("again", knobs=dict(done.proposal["knobs"]))  # the same values
    twin = Node(
        "r", 5, 0, "improve", NodeStatus.REJECTED, proposal=repeat.to_json(), error_kind=TWIN
    )
    p.observe(twin)
    last = p.study.get_trials(deepcopy=False)[-1]
    assert last.state.name == "COMPLETE" and last.value == done.score
    resumed = proposer()
    resumed.rebuild([ROOT, *history, twin])
    assert resumed.study.get_trials(deepcopy=False)[-1].value == done.score
