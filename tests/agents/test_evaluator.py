"""The evaluator: metric parsing, and the cascade run for real in a LocalSandbox."""

from __future__ import annotations

import io
import math
import tarfile
from pathlib import Path

import pytest

from revtree.agents import Evaluator, parse_metrics
from revtree.agents.evaluator import TAIL
from revtree.memory.records import EvalResult
from revtree.sandboxes.base import ExecResult
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks import code_files, load_task
from revtree.tasks.load import source_dir
from revtree.tasks.spec import TaskSpec


def result(stdout: str = "", metrics_text: str | None = None, exit_code: int = 0) -> ExecResult:
    return ExecResult(
        exit_code=exit_code, stdout=stdout, stderr="", duration=0.1, metrics_text=metrics_text
    )


@pytest.mark.parametrize(
    ("res", "score", "error"),
    [
        pytest.param(result('{"score": 1}', '{"score": 2.5}'), 2.5, None, id="fd3-wins"),
        pytest.param(result('{"score": 1}', "  \n"), 1.0, None, id="empty-file-falls-back"),
        pytest.param(
            result('log line\n{"score": 3, "x": [1]}\n\n'), 3.0, None, id="last-stdout-line"
        ),
        pytest.param(result('{"score": 3}\ndone\n'), None, "not JSON", id="last-line-not-json"),
        pytest.param(result("score is 5\n"), None, "not JSON", id="not-json"),
        pytest.param(result(""), None, "not JSON", id="no-output"),
        pytest.param(result("[1, 2]"), None, "must be a JSON object", id="json-array"),
        pytest.param(result("", '{"loss": 1}'), None, "'score' missing", id="missing-key"),
        pytest.param(result('{"score": "1.5"}'), None, "not a number", id="string-value"),
        pytest.param(result('{"score": NaN}'), None, "not finite", id="nan"),
        pytest.param(result('{"score": -Infinity}'), None, "not finite", id="infinity"),
        pytest.param(result('{"score": true}'), None, "not a number", id="bool"),
        pytest.param(result('{"score": null}'), None, "not a number", id="null"),
    ],
)
def test_parse_metrics(res, score, error):
    _metrics, got, err = parse_metrics(res, "score", stdout=True)
    assert got == score
    if error is None:
        assert err is None and isinstance(got, float)
    else:
        assert err is not None and error in err


def test_parse_metrics_names_the_source():
    assert "file descriptor 3" in parse_metrics(result("", "oops"), "score")[2]
    assert "stdout" in parse_metrics(result("oops"), "score", stdout=True)[2]


def test_without_opt_in_the_last_stdout_line_is_never_read():
    metrics, score, err = parse_metrics(result('{"score": 999}'), "score")
    assert (metrics, score) == ({}, None)
    assert err is not None and "nothing was written to file descriptor 3" in err
    assert "os.write(3, json.dumps(metrics).encode())" in err and "stdout_metrics" in err
    assert parse_metrics(result('{"score": 999}', '{"score": 1}'), "score")[1] == 1.0


EVALUATE = """\
import json, os, sys
from pathlib import Path

stage = sys.argv[1] if len(sys.argv) > 1 else "full"
counter = os.environ.get("COUNTER")
if counter:
    with open(counter, "a") as f:
        f.write(f"{os.environ['REVTREE_STAGE']} {os.environ['REVTREE_REPEAT']}\\n")
mode = Path("mode.txt").read_text().strip()
repeat = int(os.environ["REVTREE_REPEAT"])
if mode == "crash":
    print("starting", flush=True)
    print("warming up", file=sys.stderr)
    print("ValueError: bad input in row 7", file=sys.stderr)
    sys.exit(1)
if mode == "hang":
    import time
    time.sleep(60)
if mode == "garbage":
    print("the score is high, trust me")
    sys.exit(0)
if mode == "nan":
    os.write(3, b'{"score": NaN, "other": 1.0}')
    sys.exit(0)
if mode == "same":  # deterministic: each repeat the same value
    os.write(3, b'{"score": -7.312715117751976}')
    sys.exit(0)
score = 0.1 if stage == "smoke" else 1.0 + repeat
out = {"score": score, "seed": int(os.environ["REVTREE_SEED"]), "node": os.environ["REVTREE_NODE"]}
os.write(3, json.dumps(out).encode())
"""


def make_task(
    root: Path,
    mode: str,
    evaluate_extra: str = "",
    rest: str = "",
    direction: str = "maximize",
    counter: Path | None = None,
) -> TaskSpec:
    env = f'\n[sandbox]\nenv = {{ COUNTER = "{counter}" }}\n' if counter else ""
    toml = (
        'name = "evaltest"\neditable = ["mode.txt"]\nprotected = ["evaluate.py"]\n\n'
        f'[evaluate]\ncommand = "python evaluate.py"\nmetric = "score"\n'
        f'direction = "{direction}"\ntimeout = "20s"\n{evaluate_extra}\n'
        f"{rest}{env}\n[search]\nseed = 100\n"
    )
    root.mkdir(parents=True)
    (root / "task.toml").write_text(toml)
    (root / "evaluate.py").write_text(EVALUATE)
    (root / "mode.txt").write_text(mode + "\n")
    return load_task(root)


def archive_of(spec: TaskSpec) -> bytes:
    src = source_dir(spec)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in code_files(spec):
            tar.add(src / rel, arcname=rel)
    return buf.getvalue()


def run_eval(
    spec: TaskSpec,
    done: dict[tuple[str, int], EvalResult] | None = None,
    node_id: int = 5,
    log_dir: Path | None = None,
):
    recorded: list[EvalResult] = []
    evaluator = Evaluator(spec, LocalSandbox(), log_dir)
    outcome = evaluator.evaluate(node_id, archive_of(spec), done or {}, recorded.append)
    return outcome, recorded


def test_successful_evaluation(tmp_path):
    outcome, recorded = run_eval(make_task(tmp_path / "t", "ok"))
    assert (outcome.ok, outcome.score, outcome.score_std, outcome.n_evals) == (True, 1.0, None, 1)
    assert outcome.error is None and outcome.error_kind is None
    [rec] = recorded
    assert (rec.node_id, rec.stage, rec.repeat, rec.ok, rec.exit_code) == (5, "full", 0, True, 0)
    assert rec.metrics == {"score": 1.0, "seed": 100, "node": "5"}
    assert outcome.sandbox_seconds == pytest.approx(rec.duration)


def test_crashing_evaluator_names_exit_code_and_last_stderr_line(tmp_path):
    outcome, [rec] = run_eval(make_task(tmp_path / "t", "crash"))
    assert not outcome.ok and outcome.score is None
    assert outcome.error_kind == rec.error_kind == "crash"
    assert "exit code 1" in outcome.error
    assert "ValueError: bad input in row 7" in outcome.error
    assert "warming up" not in outcome.error
    assert rec.exit_code == 1 and "starting" in rec.stdout_tail
    assert "warming up" in rec.stderr_tail


def test_hanging_evaluator_times_out(tmp_path):
    spec = make_task(tmp_path / "t", "hang").with_overrides(evaluate={"timeout": "1s"})
    outcome, [rec] = run_eval(spec)
    assert not outcome.ok
    assert outcome.error_kind == rec.error_kind == "timeout"
    assert "timeout" in outcome.error and "1s" in outcome.error


def test_garbage_output_is_a_metrics_error(tmp_path):
    spec = make_task(tmp_path / "t", "garbage", "stdout_metrics = true\n")
    outcome, [rec] = run_eval(spec)
    assert not outcome.ok and outcome.error_kind == "metrics"
    assert "not JSON" in outcome.error and "trust me" in outcome.error
    assert rec.exit_code == 0


def test_no_metrics_on_fd3_says_how_to_report_them(tmp_path):
    outcome, [rec] = run_eval(make_task(tmp_path / "t", "garbage"))
    assert not outcome.ok and outcome.error_kind == "metrics" and rec.exit_code == 0
    assert "nothing was written to file descriptor 3" in outcome.error
    assert 'with open(3, "w") as f: json.dump(metrics, f)' in outcome.error
    assert "stdout_metrics = true" in outcome.error


def test_nan_metric_fails_and_is_stored_as_text(tmp_path):
    outcome, [rec] = run_eval(make_task(tmp_path / "t", "nan"))
    assert not outcome.ok and outcome.error_kind == "metrics"
    assert "not finite" in outcome.error
    assert rec.metrics == {"score": "nan", "other": 1.0}  # storable JSON, no bare NaN


SMOKE = '[[evaluate.stages]]\nname = "smoke"\ncommand = "python evaluate.py smoke"\n'


@pytest.mark.parametrize(
    ("direction", "threshold", "gated"),
    [
        ("maximize", 0.5, True),
        ("maximize", 0.05, False),
        ("minimize", 0.05, True),
        ("minimize", 0.5, False),
    ],
)
def test_cascade_stage_gates_the_full_stage(tmp_path, direction, threshold, gated):
    counter = tmp_path / "count.txt"
    spec = make_task(
        tmp_path / "t",
        "ok",
        SMOKE + f"threshold = {threshold}\n",
        direction=direction,
        counter=counter,
    )
    outcome, recorded = run_eval(spec)
    runs = counter.read_text().splitlines()
    if gated:
        assert not outcome.ok and outcome.error_kind == "gated"
        assert "smoke" in outcome.error and "threshold" in outcome.error
        assert [r.stage for r in recorded] == ["smoke"] and runs == ["smoke 0"]
        assert outcome.n_evals == 1
    else:
        assert outcome.ok and outcome.score == 1.0
        assert [r.stage for r in recorded] == ["smoke", "full"]
        assert runs == ["smoke 0", "full 0"]


def test_failing_stage_stops_the_cascade(tmp_path):
    counter = tmp_path / "count.txt"
    spec = make_task(tmp_path / "t", "crash", SMOKE + "threshold = 0\n", counter=counter)
    outcome, recorded = run_eval(spec)
    assert outcome.error_kind == "crash" and outcome.error.startswith("stage 'smoke'")
    assert [r.stage for r in recorded] == ["smoke"]
    assert counter.read_text().splitlines() == ["smoke 0"]


def test_repeats_give_mean_and_std(tmp_path):
    spec = make_task(tmp_path / "t", "ok", "repeats = 3\n")
    outcome, recorded = run_eval(spec)
    assert outcome.ok and outcome.n_evals == 3
    assert outcome.score == pytest.approx(2.0)  # scores 1, 2, 3
    assert outcome.score_std == pytest.approx(1.0)
    assert [(r.stage, r.repeat, r.score) for r in recorded] == [
        ("full", 0, 1.0),
        ("full", 1, 2.0),
        ("full", 2, 3.0),
    ]
    assert [r.metrics["seed"] for r in recorded] == [100, 101, 102]


def test_identical_repeats_score_their_value_exactly(tmp_path):
    """A deterministic evaluator's repeats are its score, to the last bit, with no
    spread: the mean of three copies of this value by ``statistics.fmean`` is one ulp
    off it, which later reads as noise (``finite_mean``)."""
    spec = make_task(tmp_path / "t", "same", "repeats = 3\n")
    outcome, recorded = run_eval(spec)
    assert [r.score for r in recorded] == [-7.312715117751976] * 3
    assert outcome.score == -7.312715117751976 and outcome.score_std == 0.0


def test_done_results_are_reused_not_rerun(tmp_path):
    counter = tmp_path / "count.txt"
    spec = make_task(tmp_path / "t", "ok", "repeats = 3\n", counter=counter)
    first, recorded = run_eval(spec)
    assert len(recorded) == 3 and len(counter.read_text().splitlines()) == 3

    done = {(r.stage, r.repeat): r for r in recorded[:2]}
    resumed, new = run_eval(spec, done)
    assert [(r.stage, r.repeat) for r in new] == [("full", 2)]
    assert counter.read_text().splitlines() == ["full 0", "full 1", "full 2", "full 2"]
    assert (resumed.score, resumed.score_std, resumed.n_evals) == (first.score, first.score_std, 3)

    everything = {(r.stage, r.repeat): r for r in recorded}
    again, none = run_eval(spec, everything)
    assert none == [] and len(counter.read_text().splitlines()) == 4
    assert again.ok and math.isclose(again.score, first.score)


def test_no_holdout_means_none(tmp_path):
    spec = make_task(tmp_path / "t", "ok")
    assert Evaluator(spec, LocalSandbox()).holdout(1, archive_of(spec)) is None


def test_full_output_goes_to_the_log_file_where_the_tails_lose_some(tmp_path):
    spec = make_task(tmp_path / "t", "crash")
    loud = "import sys\nsys.stderr.write('noise line\\n' * 2000)\n"
    evaluate = tmp_path / "t" / "evaluate.py"
    evaluate.write_text(loud + evaluate.read_text())
    _outcome, [rec] = run_eval(spec, log_dir=tmp_path / "logs")
    assert rec.log_path == str(tmp_path / "logs" / "node5-full-0.log")
    log = Path(rec.log_path).read_text()
    assert "$ python evaluate.py" in log and "exit code: 1" in log
    assert log.count("noise line") == 2000 and len(rec.stderr_tail) == TAIL  # cut
    assert "starting" in log and "ValueError: bad input in row 7" in log
    assert f"error: {rec.error}" in log
    assert run_eval(make_task(tmp_path / "u", "ok"))[1][0].log_path is None


def test_an_output_the_tails_hold_whole_makes_no_log_file(tmp_path):
    spec = make_task(tmp_path / "t", "crash")
    _outcome, [rec] = run_eval(spec, log_dir=tmp_path / "logs")
    assert rec.log_path is None and not (tmp_path / "logs").exists()
    assert "starting" in rec.stdout_tail + rec.stderr_tail
    assert "ValueError: bad input in row 7" in rec.stderr_tail and rec.exit_code == 1


# -- the grade step -------------------------------------------------------------------

RUN = """\
import json, os, sys
from pathlib import Path

mode = Path("mode.txt").read_text().strip()
print("run step says", mode)
print(json.dumps({"score": 999}))  # a fake last line: never read with a grade step
os.write(3, b'{"score": 999}')  # the run step's own channel: kept as a log only
if mode == "crash":
    print("solver blew up", file=sys.stderr)
    sys.exit(1)
if mode != "no-output":
    Path("answers.json").write_text(json.dumps({"value": mode}))
"""

GRADE = """\
import json, os, sys
from pathlib import Path

answers = json.loads(Path(os.environ["REVTREE_OUTPUTS"], "answers.json").read_text())
value = float(answers["value"])  # a non-number crashes the grader
hidden = Path("hidden.txt").read_text().strip() if "--holdout" in sys.argv else None
files = sorted(str(p) for p in Path(".").rglob("*") if p.is_file())
print("grading", os.environ["REVTREE_STAGE"])
metrics = {
    "score": value + int(os.environ["REVTREE_REPEAT"]),
    "stage": os.environ["REVTREE_STAGE"],
    "files": files,
    "hidden": hidden,
}
os.write(3, json.dumps(metrics).encode())
"""

GRADED = """\
name = "graded"
editable = ["mode.txt"]
protected = ["run.py", "grade.py"]

[evaluate]
command = "python run.py"
outputs = ["answers.json"]
metric = "score"
direction = "maximize"
timeout = "20s"
{evaluate}
[evaluate.grade]
command = "python grade.py"
{rest}
"""


def graded_task(root: Path, mode: str, evaluate: str = "", rest: str = "") -> TaskSpec:
    root.mkdir(parents=True)
    (root / "hidden.txt").write_text("secret instances\n")
    (root / "task.toml").write_text(GRADED.format(evaluate=evaluate, rest=rest))
    (root / "run.py").write_text(RUN)
    (root / "grade.py").write_text(GRADE)
    (root / "mode.txt").write_text(mode + "\n")
    return load_task(root)


def protected_of(spec: TaskSpec, *extra: str) -> dict[str, bytes]:
    root = Path(spec.root)
    return {p: (root / p).read_bytes() for p in ("run.py", "grade.py", *extra)}


def run_graded(spec: TaskSpec, log_dir: Path | None = None):
    recorded: list[EvalResult] = []
    evaluator = Evaluator(spec, LocalSandbox(), log_dir, protected=protected_of(spec))
    outcome = evaluator.evaluate(5, archive_of(spec), {}, recorded.append)
    return outcome, recorded


def test_grade_step_alone_scores_in_a_workspace_of_protected_files_and_outputs(tmp_path):
    spec = graded_task(tmp_path / "t", "2.5")
    assert not spec.evaluate.forgeable
    outcome, [rec] = run_graded(spec, tmp_path / "logs")
    assert outcome.ok and outcome.score == 2.5 and rec.score == 2.5
    assert rec.metrics["files"] == ["grade.py", "outputs/answers.json", "run.py"]
    assert rec.metrics["stage"] == "full"
    assert "[run step: python run.py]" in rec.stdout_tail and "run step says" in rec.stdout_tail
    assert "[grade step: python grade.py]" in rec.stdout_tail and "grading" in rec.stdout_tail
    log = Path(rec.log_path).read_text()
    assert "=== run step ===" in log and "=== grade step ===" in log
    assert "ignored: only the grade step scores" in log and '{"score": 999}' in log
    assert outcome.sandbox_seconds == pytest.approx(rec.duration)


def test_run_step_failure_fails_before_grading(tmp_path):
    outcome, [rec] = run_graded(graded_task(tmp_path / "t", "crash"))
    assert not outcome.ok and outcome.error_kind == "crash"
    assert "run step: exit code 1: solver blew up" in outcome.error
    assert "grade step" not in rec.stdout_tail and rec.score is None


def test_missing_output_fails_as_outputs(tmp_path):
    outcome, [rec] = run_graded(graded_task(tmp_path / "t", "no-output"))
    assert not outcome.ok and outcome.error_kind == rec.error_kind == "outputs"
    assert "answers.json" in outcome.error and rec.score is None


def test_grader_failure_is_named(tmp_path):
    outcome, _ = run_graded(graded_task(tmp_path / "t", "not-a-number"))
    assert not outcome.ok and outcome.error_kind == "crash"
    assert outcome.error.startswith("repeat 0: grade step: exit code 1")
    assert "ValueError" in outcome.error


def test_stages_and_repeats_go_through_the_grader(tmp_path):
    stage = (
        '[[evaluate.stages]]\nname = "smoke"\ncommand = "python run.py"\nthreshold = 1\n'
        'grade = "python grade.py --smoke"\n'
    )
    outcome, recorded = run_graded(graded_task(tmp_path / "t", "1.5", "repeats = 2\n" + stage))
    assert outcome.ok and outcome.score == pytest.approx(2.0)  # 1.5 + repeat 0, 1
    assert [(r.stage, r.repeat, r.metrics["stage"]) for r in recorded] == [
        ("smoke", 0, "smoke"),
        ("full", 0, "full"),
        ("full", 1, "full"),
    ]
    assert "[grade step: python grade.py --smoke]" in recorded[0].stdout_tail


def test_holdout_grade_sees_the_holdout_files(tmp_path):
    rest = (
        '\n[holdout]\ncommand = "python run.py"\nfiles = ["hidden.txt"]\n'
        '\n[holdout.grade]\ncommand = "python grade.py --holdout"\n'
    )
    spec = graded_task(tmp_path / "t", "3", rest=rest)
    protected = protected_of(spec, "hidden.txt")
    evaluator = Evaluator(spec, LocalSandbox(), protected=protected_of(spec))
    res = evaluator.holdout(5, archive_of(spec), protected=protected)
    assert res is not None and res.ok and res.score == 3.0 and res.stage == "holdout"
    assert res.metrics["hidden"] == "secret instances"


def test_a_grade_step_needs_the_protected_files(tmp_path):
    spec = graded_task(tmp_path / "t", "1")
    with pytest.raises(ValueError, match="protected"):
        Evaluator(spec, LocalSandbox())


def test_the_first_run_is_unpacked_ahead_only_where_its_archive_goes_as_it_is(tmp_path):
    """``Evaluator.staged``: on a local sandbox, the first run's workspace is unpacked
    while the candidate waits for its slot, and that run says when its process runs;
    not where that run is reused (``done``), nor where the grade step's hidden files are
    taken out of the archive (the run step gets another archive)."""
    boxes = tmp_path / "boxes"
    sandbox = LocalSandbox(boxes)
    spec = make_task(tmp_path / "t", "ok")
    evaluator, archive, told = Evaluator(spec, sandbox), archive_of(spec), []
    with evaluator.staged(archive, {}, lambda: told.append("running")) as staged:
        assert staged and len(list(boxes.glob("revtree-*"))) == 1
        outcome = evaluator.evaluate(1, archive, {}, lambda r: None)
    assert outcome.ok and told == ["running"]
    reused = {("full", 0): EvalResult(1, "full", 0, True, 1.0)}
    with evaluator.staged(archive, reused, told.append) as staged:
        assert not staged
    for rest, expected in (("", True), ('files = ["hidden.txt"]\n', False)):
        graded = graded_task(tmp_path / f"g{expected}", "2.5", rest=rest)
        grading = Evaluator(graded, sandbox, protected=protected_of(graded, "hidden.txt"))
        with grading.staged(archive_of(graded), {}, told.append) as staged:
            assert staged is expected
    sandbox.drain()
    assert told == ["running"] and not list(boxes.glob("revtree-*"))  # none left behind
