"""Novelty before evaluation: near twins of evaluated code are refused unevaluated, the
twin named and the proposer told; a real run against the fake server over HTTP."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from revtree.agents.llm.fake_embeddings import EmbeddingsFakeLLMServer, fake_embedding
from revtree.agents.llm.fake_models import VALUE, Climber
from revtree.agents.llm.fake_server import FakeLLMServer
from revtree.memory import NodeStatus, Store
from revtree.memory.records import TWIN
from revtree.orchestrator import novelty
from revtree.orchestrator.novelty import distance, histogram, normalise, similarity

from .test_model_bandit import climb_task, drive

LONG = [f"line_{i} = {i} * 2" for i in range(300)]


def one_model(task: Path) -> Path:
    """The climb task on one model instead of the ensemble."""
    text = (task / "task.toml").read_text().split("[[agents.coder.ensemble]]")[0]
    (task / "task.toml").write_text(text + '[agents.coder]\nmodel = "openai-compatible:one"\n')
    return task


def test_similarity_is_relative_to_the_change() -> None:
    edited = [*LONG[:100], "line_100 = 100 * 3", *LONG[101:]]
    assert distance(edited, LONG) == 2  # a character out, another in
    assert similarity(edited, LONG, LONG) == 0.0  # a one-line edit is not its parent's twin
    assert similarity(edited, LONG, list(edited)) == 1.0  # an exact repeat
    other = [*LONG[:100], "line_100 = 100 * 4", *LONG[101:]]
    assert similarity(edited, LONG, other) == 0.0  # another tweak of the same constant
    bigger = [*LONG[:10], *(f"new_{i} = compute({i}, 'long argument')" for i in range(20))]
    near = normalise("\n".join([*bigger[:-1], bigger[-1] + "  ", "", "  "]))  # spaces aside
    assert similarity(bigger, LONG[:10], near) == 1.0
    slightly = [*bigger[:-1], bigger[-1].replace("long", "lung")]
    assert 0.98 < similarity(bigger, LONG[:10], slightly) < 1.0


def test_the_histograms_never_rule_out_a_twin() -> None:
    """The bound that spares ``distance`` over every evaluated node (a run of 5,000
    candidates spent 70% of its time there) is never above it: on edits of a real
    program (this module's own source: lines changed, dropped, added, moved, characters
    past ASCII), so a twin is never skipped; and it is tight on a tweak of a constant."""
    rng = random.Random(7)
    source = normalise(Path(novelty.__file__).read_text())
    words = ["x", "ß", "len(", " ", "0.5", "été", "for", "\t", ")", "#", "→", "return"]
    for _ in range(300):
        a, b = list(source), list(source)
        for text in (a, b):
            for _ in range(rng.randint(0, 6)):
                i = rng.randrange(len(text))
                how = rng.randrange(4)
                if how == 0:
                    text[i] = text[i].replace(rng.choice(words), rng.choice(words), 1)
                elif how == 1:
                    del text[i]
                elif how == 2:
                    text.insert(i, "".join(rng.choices(words, k=rng.randint(1, 8))))
                else:
                    text.insert(rng.randrange(len(text)), text.pop(i))
        bound = int(np.abs(histogram(a) - histogram(b)).sum())
        assert bound <= distance(a, b), (bound, distance(a, b))
    edited = [*LONG[:100], "line_100 = 100 * 3", *LONG[101:]]
    assert int(np.abs(histogram(edited) - histogram(LONG)).sum()) == distance(edited, LONG) == 2


def test_numbers_are_compared_by_value() -> None:
    from revtree.orchestrator.novelty import numbers

    assert numbers(["X = 12.30", "y = f(1e-3, 2)"]) == numbers(["y = f(0.001, 2.0)", "X = 12.3"])
    assert numbers(["X = 12.3"]) != numbers(["X = 12.4"])
    assert not numbers(["x1 = a.b2 + var_3"])  # digits inside names are not numbers


@pytest.mark.slow  # a run of 16 candidates
def test_a_repeated_candidate_is_refused_unevaluated_naming_its_twin(
    tmp_path: Path, home: Path, store: Store
) -> None:
    from .conftest import revtree_here

    task = one_model(climb_task(tmp_path / "t", selection="weights", budget=17, novelty=0.98))
    with FakeLLMServer(Climber({"one": 0.6}, seed=2, repeat=1 / 3)) as srv:
        run_id = drive(store, home, task, srv.openai_url)
        prompts = [r.user for r in srv.requests if "prog.py" in r.user + r.system]
    nodes = {n.id: n for n in store.nodes(run_id)}
    twins = [n for n in nodes.values() if n.error_kind == TWIN]
    assert twins, "the fake model repeated itself: some candidate must be a twin"
    for n in twins:
        assert n.status is NodeStatus.REJECTED and not store.evaluations(run_id, n.id)
        named = int(re.search(r"near twin of node (\d+)", n.error or "").group(1))  # type: ignore[union-attr]
        other = nodes[named]
        assert other.id == 0 or other.n_evals > 0  # the twin was evaluated
        git_files = _files(home, run_id, n.commit), _files(home, run_id, other.commit)
        assert git_files[0] == git_files[1]  # the fake model repeated an answer verbatim
    first = min(twins, key=lambda n: n.id)
    told = [p for p in prompts if "Refused as repeats of code already evaluated" in p]
    assert told and f"node {first.id} (" in told[0] and "near twin of node" in told[0]
    assert prompts[-len(told) :] == told  # every prompt after the first twin says it
    assert len(prompts) - len(told) >= first.id  # the prompts of nodes 1..first did not
    shown = json.loads(revtree_here(home, "show", run_id, "--json").stdout)
    assert shown["novelty"] == {"threshold": 0.98, "evaluations_saved": len(twins)}


def _files(home: Path, run_id: str, commit: str | None) -> dict[str, bytes]:
    from revtree.memory import GitStore
    from revtree.orchestrator import RunPaths

    assert commit is not None
    return GitStore(RunPaths(home, run_id).repo).read_files(commit, ["prog.py"])


def test_near_twins_do_not_count_toward_max_nodes(tmp_path: Path, home: Path, store: Store) -> None:
    task = one_model(climb_task(tmp_path / "t", selection="weights", budget=13, novelty=0.98))
    with FakeLLMServer(Climber({"one": 0.6}, seed=2, repeat=1 / 3)) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    nodes = store.nodes(run_id)
    twins = [n for n in nodes if n.error_kind == TWIN]
    assert twins, "the fake model repeated itself: some candidate must be a twin"
    assert len(nodes) - len(twins) == 13  # the budget bought 13 nodes besides the twins
    assert "max_nodes=13" in (store.get_run(run_id).reason or "")


def test_a_proposer_that_only_repeats_itself_ends_at_max_twins(
    tmp_path: Path, home: Path, store: Store
) -> None:
    # every answer after the first repeats it (a worse draft): each later candidate, made
    # from the root (still the best), is a twin of node 1; max_twins ends the run
    task = one_model(climb_task(tmp_path / "t", selection="weights", budget=30, novelty=0.98))
    text = (
        (task / "task.toml").read_text().replace("max_nodes = 30", "max_nodes = 30\nmax_twins = 4")
    )
    (task / "task.toml").write_text(text)
    with FakeLLMServer(Climber({"one": 0.0}, seed=2, repeat=1.0)) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    info, nodes = store.get_run(run_id), store.nodes(run_id)
    assert "max_twins=4 reached" in (info.reason or ""), info.reason
    assert sum(n.error_kind == TWIN for n in nodes) == 4 and len(nodes) == 6  # root, 1, twins


def test_max_twins_defaults_to_max_nodes(home: Path, tmp_path: Path) -> None:
    from revtree.tasks import load_task

    task = one_model(climb_task(tmp_path / "t", selection="weights", budget=5, novelty=0.98))
    assert load_task(task).budget.max_twins is None  # the budget's rule: as many as max_nodes
    with FakeLLMServer(Climber({"one": 0.0}, seed=2, repeat=1.0)) as srv:
        store = Store(f"sqlite:///{home / 'db.sqlite'}")
        run_id = drive(store, home, task, srv.openai_url)
    assert "max_twins=5 reached" in (store.get_run(run_id).reason or "")
    assert sum(n.error_kind == TWIN for n in store.nodes(run_id)) == 5
    store.close()


def by_meaning(text: str) -> list[float]:
    """The fake embedding model of these tests: words and numbers, a number by its value
    however it is written (``12.30`` is ``12.3``)."""
    canon = re.sub(r"\d+\.\d+", lambda m: repr(float(m.group())), text)
    return fake_embedding(canon, words=r"[a-z]{3,}|\d+(?:\.\d+)?")


def embedding_task(tmp_path: Path, budget: int, threshold: float = 0.99) -> Path:
    """The climb task on one model, with embeddings at the fake server."""
    task = one_model(climb_task(tmp_path, selection="weights", budget=budget, novelty=0.98))
    text = (task / "task.toml").read_text()
    text = text.replace('mode = "llm"', 'mode = "llm"\nembeddings_model = "emb"')
    text = text.replace(
        "novelty_threshold", f"novelty_embeddings_threshold = {threshold}\nnovelty_threshold"
    )
    (task / "task.toml").write_text(text)
    return task


def _x(home: Path, run_id: str, commit: str | None) -> float:
    return float(VALUE.search(_files(home, run_id, commit)["prog.py"].decode()).group(1))  # type: ignore[union-attr]


@pytest.mark.slow  # two runs of 14 candidates
def test_a_repeat_written_otherwise_is_refused_by_embeddings_only(
    tmp_path: Path, home: Path, store: Store
) -> None:
    from .conftest import revtree_here

    runs = {}
    for threshold in (0.99, 1.0):  # embeddings on, then off: the text check alone
        task = embedding_task(tmp_path / str(threshold), budget=14, threshold=threshold)
        model = Climber({"one": 0.6}, seed=4, paraphrase=0.4)
        with EmbeddingsFakeLLMServer(model, embed=by_meaning) as srv:
            runs[threshold] = drive(store, home, task, srv.openai_url)
            embedded = [t for batch in srv.embedding_inputs for t in batch]
        assert model.repeats > 0, "the fake model must have paraphrased some answer"
        if threshold == 1.0:
            assert not any(t.startswith("---") for t in embedded)  # no change embedded
    on = {n.id: n for n in store.nodes(runs[0.99])}
    twins = [n for n in on.values() if n.error_kind == TWIN]
    assert twins, "a paraphrase from the same parent must be refused"
    for n in twins:
        assert "embedding similarity of the changes" in (n.error or "")
        named = on[int(re.search(r"near twin of node (\d+)", n.error or "").group(1))]  # type: ignore[union-attr]
        assert named.n_evals > 0 and not store.evaluations(runs[0.99], n.id)
        assert _x(home, runs[0.99], n.commit) == _x(home, runs[0.99], named.commit)
        assert _files(home, runs[0.99], n.commit) != _files(home, runs[0.99], named.commit)
    off = store.nodes(runs[1.0])
    assert not any(n.error_kind == TWIN for n in off)  # the text check let them through
    seen: dict[float, int] = {}
    for n in sorted(off, key=lambda n: n.id):  # ... and they were evaluated again
        if n.n_evals > 0 and n.parent_id is not None:
            seen[_x(home, runs[1.0], n.commit)] = seen.get(_x(home, runs[1.0], n.commit), 0) + 1
    assert max(seen.values()) > 1, seen
    shown = json.loads(revtree_here(home, "show", runs[0.99], "--json").stdout)["novelty"]
    assert shown["by_embeddings"] == shown["evaluations_saved"] == len(twins)
    assert shown["embeddings_threshold"] == 0.99
    from revtree.orchestrator.commands.report import summarize
    from revtree.web.queries import SummaryView

    page = summarize(SummaryView(store), store.get_run(runs[0.99]))["novelty"]
    assert page == shown  # the dashboard's read model tells the same


@pytest.mark.slow  # a run of 13 candidates
def test_a_failing_embeddings_endpoint_leaves_the_text_check(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = embedding_task(tmp_path / "t", budget=13)  # as the max_nodes test: twins by text
    model = Climber({"one": 0.6}, seed=2, repeat=1 / 3)
    with EmbeddingsFakeLLMServer(model, embeddings_status=500, embed=by_meaning) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    info, nodes = store.get_run(run_id), store.nodes(run_id)
    assert info.status.value == "completed", info.reason
    said = [e.message for e in store.events_since(run_id) if e.kind == "warning"]
    off = [m for m in said if "novelty check's embeddings are off" in m]
    assert len(off) == 1 and "500" in off[0], said
    twins = [n for n in nodes if n.error_kind == TWIN]
    assert twins, "the verbatim repeats are still refused, by text"
    assert all("embedding" not in (n.error or "") for n in twins)


def test_embeddings_only_where_models_drive_the_run(tmp_path: Path) -> None:
    from revtree.orchestrator.novelty import change_embeddings
    from revtree.tasks import load_task

    task = embedding_task(tmp_path / "t", budget=3)
    assert change_embeddings(load_task(task), print) is not None  # the model's run
    text = (task / "task.toml").read_text().replace('mode = "llm"', 'mode = "mutate"')
    (task / "task.toml").write_text(text)
    assert change_embeddings(load_task(task), print) is None  # no code to an endpoint


def test_vectors_of_different_sizes_turn_the_embeddings_off(tmp_path: Path) -> None:
    from revtree.agents.retrieval import OpenAIEmbedder
    from revtree.orchestrator.novelty import ChangeEmbeddings

    said: list[str] = []
    ragged = EmbeddingsFakeLLMServer(lambda r: "OK", embed=lambda t: [1.0] * (1 + len(t) % 3))
    with ragged as srv:
        embeddings = ChangeEmbeddings(
            OpenAIEmbedder("emb", srv.openai_url, None), 0.99, said.append
        )
        assert embeddings.of({1: lambda: "a", 2: lambda: "bb"}) is None
        assert embeddings.of({3: lambda: "ccc"}) is None and len(ragged.embedding_inputs) == 1
    assert len(said) == 1 and "vectors of sizes [2, 3]" in said[0], said


def test_the_compared_nodes_are_kept_as_the_mirror_changes(
    tmp_path: Path, home: Path, store: Store
) -> None:
    """The twin check compares a candidate with the baseline and every node that was or
    is being evaluated (with a commit): an index the mirror keeps as nodes change, which
    must hold what a pass over every node would find, after adds, evaluations, failures
    before evaluation, retries that reset a commit or an evaluation count, and twins."""
    from revtree.memory import GitStore, Node
    from revtree.orchestrator import create_run
    from revtree.orchestrator.mirror import Mirror
    from revtree.orchestrator.run import RunPaths
    from revtree.tasks import load_task

    from .conftest import make_task

    spec = load_task(make_task(tmp_path / "task"))
    run = create_run(store, spec, home)
    git = GitStore(RunPaths(home, run.id).repo)
    root = store.nodes(run.id)[0]
    assert root.commit is not None
    commits = [root.commit] + [
        git.commit_files({"sol.py": f"X = {i}.0\nN = 2\n".encode()}, f"c{i}") for i in range(1, 6)
    ]
    mirror = Mirror(store, run.id, spec.maximize, store.nodes(run.id))
    check = novelty.Novelty(spec, git, mirror)

    def former() -> set[int]:  # the pass over every node the index replaced
        evaluated = (NodeStatus.SUCCEEDED, NodeStatus.EVALUATING)
        return {
            n.id
            for n in mirror.nodes.values()
            if n.commit is not None and (n.n_evals > 0 or n.status in evaluated or n.id == 0)
        }

    rng = random.Random(5)
    statuses = list(NodeStatus)
    for step in range(120):
        if step < 6 or rng.random() < 0.3:
            parent = rng.choice(list(mirror.nodes))
            node = Node(run.id, max(mirror.nodes) + 1, parent, "improve", NodeStatus.PENDING)
            mirror.add(node, ("select", f"node {node.id}", None), {})
        else:
            node = mirror.get(rng.choice(list(mirror.nodes)))
            mirror.set(
                node.id,
                None,
                status=rng.choice(statuses),
                commit=rng.choice([None, *commits]),
                n_evals=rng.choice([0, 0, 1, 2]),
                error_kind=rng.choice([None, TWIN]),
            )
        assert set(check._compared) == former(), step
        rows = check._compared.items()
        assert all(check._commits[row] == mirror.get(i).commit for i, row in rows), step


FIRST_ONLY = """\
import json, sys
from pathlib import Path
from revtree.memory import Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
task, home, url = sys.argv[1:]
store = Store(f"sqlite:///{home}/db.sqlite")
spec = load_task(task).with_overrides(agents={"base_url": url}, sandbox={"backend": "local"})
run = create_run(store, spec, Path(home))
Orchestrator(store, run.id, home=Path(home)).drive()
nodes = store.nodes(run.id)
print(json.dumps({"numpy": "numpy" in sys.modules, "nodes": len(nodes),
                  "evaluated": sum(n.n_evals > 0 for n in nodes)}))
"""


@pytest.mark.slow  # a whole run, in a Python of its own
def test_a_runs_first_candidate_pays_no_numpy_import(tmp_path: Path) -> None:
    """numpy (50-100 ms to import on 2 cores) comes in once the near-twin check or the
    proposer's memory has something to compare, not on the path of a run's first
    candidates, which go beside each other (issue 24): a whole run of the baseline and
    one candidate, twin check on, driven in a fresh interpreter, never imports it."""
    import subprocess
    import sys

    task = climb_task(tmp_path / "t", selection="weights", budget=2, novelty=0.9)
    (tmp_path / "home").mkdir()
    with FakeLLMServer(Climber({"one": 0.6, "two": 0.6, "three": 0.6}, seed=2)) as srv:
        out = subprocess.run(
            [sys.executable, "-c", FIRST_ONLY, str(task), str(tmp_path / "home"), srv.openai_url],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"numpy": False, "nodes": 2, "evaluated": 2}, seen
