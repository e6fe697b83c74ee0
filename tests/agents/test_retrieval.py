"""Retrieval over a synthetic 300-file repository: BM25 always, embeddings through a
fake OpenAI ``/embeddings`` endpoint, the index updated for changed files only, and
the recall of 24 scripted goals, each naming what one helper module does."""

from __future__ import annotations

# ruff: noqa: E501  (the table of scripted goals reads best one row a line)
import random
import textwrap
from collections.abc import Mapping

import pytest

from revtree.agents.context import ContextBuilder
from revtree.agents.llm.fake_embeddings import EmbeddingsFakeLLMServer
from revtree.agents.outline import symbols_text
from revtree.agents.retrieval import Index, OpenAIEmbedder, stem, words
from revtree.tasks.spec import TaskSpec

# (module, function, what it does, a goal naming that behaviour in other words)
HELPERS = [
    (
        "lib/geo/sphere.py",
        "haversine",
        "Great-circle distance between two latitude/longitude points on a sphere.",
        "Use the great-circle distance between GPS coordinates instead of the flat approximation.",
    ),
    (
        "lib/text/edit_distance.py",
        "levenshtein",
        "Minimum number of single-character insertions, deletions and substitutions turning a into b.",
        "Compare names by how many character insertions and deletions turn one into the other.",
    ),
    (
        "lib/signal/smoothing.py",
        "exponential_moving_average",
        "Smooth a noisy series with an exponentially weighted moving average.",
        "Smooth the noisy predictions with an exponentially weighted average before returning them.",
    ),
    (
        "lib/codec/rle.py",
        "run_length_encode",
        "Compress runs of repeated symbols into (symbol, count) pairs.",
        "Compress runs of repeated symbols before storing the sequence.",
    ),
    (
        "lib/graph/shortest.py",
        "dijkstra",
        "Shortest path lengths from a source over a weighted graph, with a priority queue.",
        "Route over the weighted graph along the shortest path from the source.",
    ),
    (
        "lib/stats/robust.py",
        "median_absolute_deviation",
        "A robust spread estimate: the median of absolute deviations from the median.",
        "Make the outlier threshold robust: use the median absolute deviation as the spread.",
    ),
    (
        "lib/opt/schedule.py",
        "cosine_annealing",
        "Learning rate following half a cosine from lr_max down to lr_min.",
        "Decay the learning rate with cosine annealing.",
    ),
    (
        "lib/linalg/solve.py",
        "conjugate_gradient",
        "Solve a symmetric positive definite linear system iteratively.",
        "Solve the symmetric positive definite system iteratively instead of inverting the matrix.",
    ),
    (
        "lib/hash/bloom.py",
        "BloomFilter",
        "Probabilistic set membership: false positives, never false negatives.",
        "Check membership with a probabilistic filter that tolerates false positives.",
    ),
    (
        "lib/cache/lru.py",
        "LRUCache",
        "A mapping that evicts the least recently used entry when full.",
        "Cache results, evicting the least recently used entries once full.",
    ),
    (
        "lib/random/reservoir.py",
        "reservoir_sample",
        "A uniform sample of k items from a stream of unknown length.",
        "Draw a uniform sample of k items from a stream without knowing its length.",
    ),
    (
        "lib/geometry/hull.py",
        "convex_hull",
        "Monotone chain convex hull of 2-D points.",
        "Keep only the points on the convex hull of the point cloud.",
    ),
    (
        "lib/time/iso.py",
        "parse_iso8601",
        "Parse timestamps like 2024-01-31T12:00:00Z into seconds since the epoch.",
        "Read ISO 8601 timestamps as seconds since the epoch.",
    ),
    (
        "lib/numeric/integrate.py",
        "simpson",
        "Composite Simpson's rule for a definite integral.",
        "Integrate the curve with Simpson's rule rather than rectangles.",
    ),
    (
        "lib/numeric/roots.py",
        "newton_raphson",
        "Find a root of f from its derivative by Newton's method.",
        "Find the root of the equation by Newton's method with the derivative.",
    ),
    (
        "lib/tokenize/bpe.py",
        "byte_pair_merges",
        "Repeatedly merge the most frequent adjacent pair of tokens (byte-pair encoding).",
        "Split words into subword units by merging frequent adjacent pairs.",
    ),
    (
        "lib/image/blur.py",
        "gaussian_blur",
        "Convolve an image with a Gaussian kernel.",
        "Blur the image with a Gaussian kernel to remove noise.",
    ),
    (
        "lib/metrics/auc.py",
        "roc_auc",
        "Area under the receiver operating characteristic curve.",
        "Report the area under the ROC curve of the classifier scores.",
    ),
    (
        "lib/cluster/kmeans.py",
        "kmeans",
        "Lloyd's algorithm: assign points to the nearest centroid, recompute centroids.",
        "Group the samples into k clusters around centroids.",
    ),
    (
        "lib/sched/topo.py",
        "topological_order",
        "Order tasks so each comes after its dependencies (Kahn's algorithm).",
        "Run the build steps in dependency order, each after what it depends on.",
    ),
    (
        "lib/crypto/checksum.py",
        "adler32",
        "Adler-32 rolling checksum of a byte string.",
        "Detect corrupted payloads with a rolling checksum.",
    ),
    (
        "lib/search/bisection.py",
        "lower_bound",
        "First index where a value could be inserted into a sorted list, by binary search.",
        "Find the insertion position among the sorted thresholds by binary search.",
    ),
    (
        "lib/money/rounding.py",
        "round_half_even",
        "Banker's rounding of an amount to a number of decimals.",
        "Round currency amounts half to even (banker's rounding).",
    ),
    (
        "lib/units/temperature.py",
        "fahrenheit_to_kelvin",
        "Convert temperatures between Celsius, Fahrenheit and Kelvin.",
        "Convert the sensor temperatures from Fahrenheit to Kelvin.",
    ),
]
VOCAB = [
    "load",
    "save",
    "batch",
    "tensor",
    "config",
    "parse",
    "record",
    "buffer",
    "stream",
    "value",
    "index",
    "table",
    "rate",
    "sample",
    "point",
    "series",
    "average",
    "distance",
    "filter",
    "cache",
    "order",
    "sort",
    "path",
    "node",
    "graph",
    "count",
    "time",
    "image",
    "score",
    "weight",
    "layer",
    "model",
    "train",
    "step",
    "loss",
    "queue",
    "token",
    "state",
    "merge",
    "split",
    "window",
    "scale",
    "limit",
    "range",
    "field",
    "entry",
    "report",
    "metric",
    "signal",
    "noise",
    "matrix",
    "vector",
    "kernel",
    "update",
]
MODEL = '''\
"""The model the task evolves: predict(x) is the function to change."""

import math


def predict(x):
    """The prediction for x (to improve)."""
    return x * 1.0


def predict_many(xs):
    return [predict(x) for x in xs]
'''
EVALUATOR = "import json, os, zz_model\nDATA = [0.5, 1.5, 2.5]  # secret evaluation data\n" + (
    "err = sum((zz_model.predict(x) - (3 * x + 2)) ** 2 for x in DATA)\n"
    "os.write(3, json.dumps({'err': err}).encode())\n"
)


def helper_module(fn: str, doc: str, rng: random.Random) -> str:
    head = f'"""{doc}"""\n\n\ndef {fn}(*args, **kwargs):\n    """{doc}"""\n    return args\n'
    return head + "\n\n" + filler(rng, 3)


def filler(rng: random.Random, functions: int) -> str:
    out = []
    for _ in range(functions):
        a, b, c = rng.sample(VOCAB, 3)
        body = "\n".join(
            f"    {rng.choice(VOCAB)}_{i} = {rng.choice(VOCAB)}_{rng.choice(VOCAB)}({a}, {i})"
            for i in range(8)
        )
        out.append(
            f"def {a}_{b}_{c}({a}, {b}=None):\n"
            f'    """{" ".join(rng.sample(VOCAB, 9)).capitalize()}."""\n{body}\n    return {a}\n'
        )
    return "\n\n".join(out)


def synthetic_repo(n_files: int = 300, seed: int = 0) -> dict[str, str]:
    """``n_files`` files (more than 1 MB): 24 helpers, fillers, ``zz_model.py`` (the
    editable file, sorting last) and ``evaluate.py`` (protected, with its data)."""
    rng = random.Random(seed)
    files = {p: helper_module(fn, doc, rng) for p, fn, doc, _ in HELPERS}
    files["zz_model.py"], files["evaluate.py"] = MODEL, EVALUATOR
    i = 0
    while len(files) < n_files:
        files[f"pkg_{i // 20:02d}/{rng.choice(VOCAB)}_{i:03d}.py"] = filler(rng, 12)
        i += 1
    return files


def spec_for(**agents: object) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "name": "synth",
            "goal": "Make predict(x) in zz_model.py match the hidden target.",
            "editable": ["zz_model.py"],
            "protected": ["evaluate.py"],
            "evaluate": {"command": "python evaluate.py", "metric": "err", "direction": "minimize"},
            "agents": agents,
        }
    )


def as_bytes(files: Mapping[str, str]) -> dict[str, bytes]:
    return {p: t.encode() for p, t in files.items()}


def recall(index: Index, files: Mapping[str, bytes], budget: int = 24000) -> tuple[int, int]:
    """How many scripted goals put their helper module among the prompt's related files."""
    builder = ContextBuilder(spec_for(), files, budget, index=index)
    left = budget - builder.prefix_tokens
    hits = sum(path in builder.related(files, goal, left).shown for path, _, _, goal in HELPERS)
    return hits, len(HELPERS)


@pytest.fixture(scope="module")
def repo() -> dict[str, bytes]:
    return as_bytes(synthetic_repo())


def test_the_synthetic_repository_is_large_and_sorts_the_editable_file_last(
    repo: dict[str, bytes],
) -> None:
    assert len(repo) == 300 and sum(map(len, repo.values())) > 1_000_000
    assert sorted(repo)[-1] == "zz_model.py"


def test_words_split_identifiers_and_stem() -> None:
    assert {"gaussian", "kernel", "gaussiankernel"} <= set(words("gaussianKernel"))
    assert {"gaussian", "kernel", "gaussian_kernel"} <= set(words("gaussian_kernel(x)"))
    assert stem("distances") == stem("distance") and stem("encoding") == stem("encoded")
    assert "the" not in words("the return of self")


def test_keyword_search_finds_the_helper_of_most_goals(repo: dict[str, bytes]) -> None:
    hits, n = recall(Index(repo), repo)
    assert n >= 20 and hits / n >= 0.8


def test_the_index_is_built_once_and_updated_for_changed_files_only(
    repo: dict[str, bytes],
) -> None:
    index = Index(repo)
    assert index.update(repo) == 0
    changed = dict(repo)
    changed["lib/cache/lru.py"] = repo["lib/cache/lru.py"] + b"\ndef tiered_spill_eviction(): ...\n"
    assert index.update(changed) == 1
    best = index.search("tiered spill eviction", changed, k=1)
    assert best[0].path == "lib/cache/lru.py"
    assert all(h.path != "lib/cache/lru.py" for h in index.search("tiered spill", repo, k=3))


def test_semantic_search_through_a_fake_embeddings_endpoint(repo: dict[str, bytes]) -> None:
    small = {p: d for p, d in repo.items() if p.startswith("lib/") or p.startswith("pkg_00")}
    with EmbeddingsFakeLLMServer(lambda req: "unused") as srv:
        embedder = OpenAIEmbedder("fake-embed", srv.openai_url, None, timeout=10)
        index = Index(small, embedder, symbols_text)
        batches = len(srv.embedding_inputs)
        assert index.semantic and batches == -(-len(small) // 64)
        # "smoothly" shares no BM25 term with the module ("smooth"), but shares a stem:
        # the fake embeddings (like real ones) relate them
        assert not index.search("smoothly", small, k=3)[0].how.startswith("keyword")
        assert index.search("smoothly", small, k=1)[0].path == "lib/signal/smoothing.py"
        changed = dict(small, **{"lib/codec/rle.py": small["lib/codec/rle.py"] + b"# new\n"})
        before = len(srv.embedding_inputs)
        index.search("runs", changed, k=3)
        docs = [c for c in srv.embedding_inputs[before:] if c[0].startswith("lib/")]
        assert len(docs) == 1 and len(docs[0]) == 1 and docs[0][0].startswith("lib/codec/rle.py")


def test_a_failing_embeddings_endpoint_leaves_keyword_search(repo: dict[str, bytes]) -> None:
    small = {p: d for p, d in repo.items() if p.startswith("lib/")}
    with EmbeddingsFakeLLMServer(lambda req: "unused", embeddings_status=500) as srv:
        index = Index(small, OpenAIEmbedder("fake-embed", srv.openai_url, None, timeout=5))
    assert not index.semantic and "500" in (index.semantic_error or "")
    hits = index.search("great-circle distance", small, k=1)
    assert hits[0].path == "lib/geo/sphere.py" and hits[0].how == "keyword"


def test_text_of_a_helper() -> None:
    text = helper_module("f", "Doc.", random.Random(1))
    assert textwrap.dedent(text).startswith('"""Doc."""')
