"""Starting material: a new task folder (``revtree init``) and the scripted stand-in for
a model that ``revtree demo --llm`` serves.

``scaffold`` writes ``task.toml``, a ``.gitignore`` and, when no evaluator command is
given, an ``evaluate.py`` in two steps (README, "The grade step"): ``python evaluate.py
run`` imports the program, calls its function and writes what it returned to
``answers.json`` (untrusted: the candidate's code runs there); ``python evaluate.py
grade`` turns that answer into the metric, in a fresh sandbox that holds no code of the
candidate, and writes it as JSON to file descriptor 3. The task is loaded back before
``scaffold`` returns, so what it writes is a valid task that runs at once.

``DemoResponder`` answers a ``FakeLLMServer``'s requests like the agents' models would:
a hypothesis for the proposer, a SEARCH/REPLACE edit that changes one number of the
editable file for the coder, an acceptance for the reviewer, ``ok`` for anything else.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import shlex
import shutil
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from revtree.agents.llm.fake_server import FakeRequest, current_file
from revtree.errors import TaskSpecError
from revtree.orchestrator.commands.check import Report, preflight
from revtree.orchestrator.commands.constants import find_knobs, knobs_toml
from revtree.sandboxes import make_sandbox
from revtree.tasks import TaskSpec, load_task
from revtree.tasks.sandbox import without_pool
from revtree.tasks.spec import Knob

TASK_FILE, EVALUATOR, ANSWERS = "task.toml", "evaluate.py", "answers.json"
DIRECTIONS = ("minimize", "maximize")
ENTRY_NAMES = ("main", "solve", "run")  # preferred, in order, over the first function
IGNORED = ("__pycache__/", "*.pyc", ANSWERS, "outputs/")

EVALUATE_PY = '''\
"""The evaluator `revtree init` wrote for {program}: edit score() to measure what matters.

Two steps, as task.toml's [evaluate] and [evaluate.grade] say (README: "The grade step"):

  python evaluate.py run    runs the candidate: imports {program}, calls {call}
                            and writes what it returned to {answers} (the candidate's
                            code runs here: nothing it writes is trusted as a score)
  python evaluate.py grade  scores that answer in a fresh sandbox holding only this file
                            and outputs/{answers} (never the candidate's code) and
                            writes the metric as JSON to file descriptor 3

Try it here:
  python evaluate.py run && mkdir -p outputs && cp {answers} outputs/ && python evaluate.py grade
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import os
import runpy
import sys
import time

PROGRAM = {program!r}  # the editable program
ENTRY = {entry!r}  # the function called (None: run the program, read its last stdout line)
METRIC = {metric!r}
ANSWERS = {answers!r}


def run() -> None:
    sys.path.insert(0, os.getcwd())
    t0 = time.perf_counter()
    if ENTRY is None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            runpy.run_path(PROGRAM, run_name="__main__")
        lines = [line for line in out.getvalue().splitlines() if line.strip()]
        answer = lines[-1] if lines else None
    else:
        spec = importlib.util.spec_from_file_location("program", PROGRAM)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        answer = getattr(module, ENTRY)()
    seconds = time.perf_counter() - t0
    with open(ANSWERS, "w") as f:
        json.dump({{"answer": answer, "seconds": seconds}}, f, default=repr)


def score(answer, seconds):
    """The metric of the program's answer. EDIT THIS: compute the score yourself from
    the answer (compare it with expected results, measure its quality): never trust a
    number the program claims about itself. As written, the answer is the metric: a
    number, or a JSON object that holds METRIC."""
    if isinstance(answer, dict):
        answer = answer.get(METRIC)
    return float(answer)


def grade() -> None:
    folder = os.environ.get("REVTREE_OUTPUTS", "outputs")
    with open(os.path.join(folder, ANSWERS)) as f:
        data = json.load(f)
    value = score(data.get("answer"), data.get("seconds"))
    if not math.isfinite(value):
        sys.exit(f"the metric {{METRIC}} is {{value}}: not a finite number")
    line = json.dumps({{METRIC: value, "seconds": data.get("seconds")}})
    with contextlib.suppress(OSError):  # outside revtree file descriptor 3 is closed
        os.write(3, line.encode())
    print(line)


if __name__ == "__main__":
    {{"run": run, "grade": grade}}[sys.argv[1] if len(sys.argv) > 1 else "run"]()
'''


@dataclass(frozen=True)
class Scaffold:
    """What ``scaffold`` made: the folder, the files it wrote (relative), the task."""

    folder: Path
    written: tuple[str, ...]
    spec: TaskSpec
    program: str  # the editable file, relative to the folder
    entry: str | None  # the function the generated evaluator calls, if it generated one
    knobs: tuple[Knob, ...] = ()  # the program's constants, written as [[knobs]]


def scaffold(
    folder: Path,
    program: Path,
    metric: str,
    direction: str,
    evaluator: str | None = None,
    *,
    name: str | None = None,
    force: bool = False,
    knobs: bool = True,
) -> Scaffold:
    """Make ``folder`` a task that optimises ``program`` (copied in unless it is there
    already) for ``metric`` in ``direction``, scored by ``evaluator`` (a command run in
    the workspace) or, without one, by a generated ``evaluate.py`` with a grade step.
    With ``knobs``, the module-level constants of a Python program become ``[[knobs]]``
    (``revtree.orchestrator.commands.constants``). Refuses (``TaskSpecError``) to
    overwrite a task.toml, or any other file it would write, unless ``force``."""
    folder = folder.expanduser().resolve()
    if direction not in DIRECTIONS:
        raise TaskSpecError(f"--direction must be minimize or maximize, not {direction!r}")
    if not metric.strip():
        raise TaskSpecError("--metric must name the score's key in the metrics JSON")
    source = program.expanduser().resolve()
    if not source.is_file():
        raise TaskSpecError(f"{program}: no such program file")
    if (folder / TASK_FILE).exists() and not force:
        raise TaskSpecError(f"{folder / TASK_FILE} exists; pass --force to overwrite it")
    inside = source.is_relative_to(folder)
    rel = source.relative_to(folder).as_posix() if inside else source.name
    if rel in (TASK_FILE, EVALUATOR if evaluator is None else "", ".gitignore"):
        raise TaskSpecError(f"{program}: a program cannot be named {rel} (revtree writes it)")
    entry, text = None, source.read_text(encoding="utf-8", errors="replace")
    found = tuple(find_knobs(text, rel)) if knobs and source.suffix == ".py" else ()
    if evaluator is None:
        if source.suffix != ".py":
            raise TaskSpecError(
                f"{program}: the generated evaluator runs Python programs; for another "
                "language pass --evaluator CMD (a command that writes the metric as JSON to "
                "file descriptor 3)"
            )
        entry = entry_point(text, program)
    files: dict[str, str] = {}
    if evaluator is None:
        call = f"{entry}()" if entry else "it as a script"
        files[EVALUATOR] = EVALUATE_PY.format(
            program=rel, entry=entry, metric=metric, answers=ANSWERS, call=call
        )
    files[TASK_FILE] = task_toml(folder, rel, metric, direction, evaluator, name, found)
    clash = [p for p in files if p != TASK_FILE and (folder / p).exists() and not force]
    if not inside and (folder / rel).exists() and not force:
        clash.append(rel)
    if clash:
        hint = f' (or --evaluator "python {EVALUATOR}" to keep yours)' if EVALUATOR in clash else ""
        raise TaskSpecError(f"{folder}: would overwrite {', '.join(clash)}; pass --force{hint}")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    if not inside:
        shutil.copyfile(source, folder / rel)
        written.append(rel)
    for path, text in files.items():
        (folder / path).write_text(text, encoding="utf-8")
        written.append(path)
    if gitignore(folder / ".gitignore", evaluator is None):
        written.append(".gitignore")
    return Scaffold(folder, tuple(written), load_task(folder), rel, entry, found)


def try_evaluator(spec: TaskSpec) -> Report:
    """The task's evaluator run once on the baseline, as ``revtree check`` runs it but
    in the local sandbox: ``init`` runs the user's own command on the user's own
    program, as their shell would (no model wrote any of it), on any machine."""
    with tempfile.TemporaryDirectory(prefix="revtree-init-") as tmp:
        config = without_pool(spec.sandbox)
        sandbox = make_sandbox("local", base_dir=Path(tmp) / "work", config=config)
        try:
            return preflight(spec, sandbox=sandbox, models=False)
        finally:
            sandbox.close()


def read_stdout_metrics(made: Scaffold) -> Scaffold:
    """``made`` with ``stdout_metrics = true`` (and its comment) in its task.toml."""
    e = made.spec.evaluate
    text = task_toml(
        made.folder, made.program, e.metric, e.direction, e.command, made.spec.name,
        made.knobs, stdout_metrics=True,
    )  # fmt: skip
    (made.folder / TASK_FILE).write_text(text, encoding="utf-8")
    return replace(made, spec=load_task(made.folder))


def entry_point(text: str, program: Path) -> str | None:
    """The function the generated evaluator calls: ``main``, ``solve`` or ``run``, else
    the first top-level function that needs no argument; None (run it as a script) when
    it has none."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise TaskSpecError(f"{program}: not valid Python: {e}") from e
    callable_ = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            a = node.args
            required = len(a.posonlyargs) + len(a.args) - len(a.defaults)
            required += sum(d is None for d in a.kw_defaults)
            if required == 0:
                callable_.append(node.name)
    preferred = [n for n in ENTRY_NAMES if n in callable_]
    found = preferred or callable_
    return found[0] if found else None


def task_name(folder: Path, name: str | None) -> str:
    raw = name or folder.name or "task"
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-._")
    return clean or "task"


STDOUT_METRICS = [
    "stdout_metrics = true  # the metrics are the last line the command prints",
    "# Risk: the candidate's code runs inside this command, so it can print a forged",
    "# metrics line. A grade step cannot be forged: have the command write its result to",
    '# a file (outputs = [...]) and score that in [evaluate.grade] (README: "The grade',
    '# step"; `revtree init` without --evaluator writes such an evaluate.py).',
]


def task_toml(
    folder: Path,
    program: str,
    metric: str,
    direction: str,
    evaluator: str | None,
    name: str | None,
    knobs: tuple[Knob, ...] = (),
    *,
    stdout_metrics: bool = False,
) -> str:
    q = json.dumps  # a JSON string is a TOML basic string
    head = [
        '# Written by `revtree init`; every key is in the README\'s "The task file".',
        f"name = {q(task_name(folder, name))}",
        f"goal = {q(f'Make {program} {direction} {metric}.')}",
        f"editable = [{q(program)}]",
    ]
    if evaluator is None:
        head += [
            f"protected = [{q(EVALUATOR)}]",
            "",
            "[evaluate]",
            'command = "python evaluate.py run"     # runs the candidate\'s code: untrusted',
            f"outputs = [{q(ANSWERS)}]             # what it hands the grade step",
        ]
    else:
        named = [w for w in _words(evaluator) if w != program and (folder / w).is_file()]
        head += [
            f"protected = [{', '.join(q(p) for p in named)}]",
            "",
            "[evaluate]",
            '# no grade step: the score is as trustworthy as this command (README: "The grade',
            '# step" splits it in a run step and a trusted grader)',
            f"command = {q(evaluator)}",
            *(STDOUT_METRICS if stdout_metrics else []),
        ]
    head += [
        f"metric = {q(metric)}",
        f"direction = {q(direction)}",
        'timeout = "60s"',
    ]
    if evaluator is None:
        head += [
            "",
            "[evaluate.grade]",
            'command = "python evaluate.py grade"   # trusted',
            "# Labels (expected answers) for score(): protected files only this step sees,",
            '# never in the run step\'s workspace. files = ["expected.json"]',
        ]
    head += [
        "",
        "[search]",
        'policy = "greedy"',
        "",
        "[budget]",
        "max_nodes = 30",
        "",
        '# [agents] mode = "auto" (the default): LLM agents where OPENAI_API_KEY or',
        "# ANTHROPIC_API_KEY is set (or with --model), else offline: "
        + (
            "an Optuna proposer tunes",
            "seeded mutations of the",
        )[not knobs],
        (
            "# the [[knobs]] below (with no knobs: seeded mutations of the code).",
            "# editable file's numbers and operators; [[knobs]] tune named values instead.",
        )[not knobs],
    ]
    if knobs:
        head += [
            "",
            f"# The module-level constants of {program}, found by `revtree init`, with ranges",
            "# around their values: remove any that is part of the problem, not of the",
            "# solution (a capacity, a size), and widen or narrow the ranges as you know them.",
            *knobs_toml(knobs),
        ]
    return "\n".join(head) + "\n"


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def gitignore(path: Path, template: bool) -> bool:
    """Add the lines revtree's files need to ``.gitignore``; whether it changed."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    have = set(old.splitlines())
    want = [line for line in IGNORED if (template or line != ANSWERS) and line not in have]
    if not want:
        return False
    sep = "" if not old or old.endswith("\n") else "\n"
    path.write_text(old + sep + "\n".join(want) + "\n", encoding="utf-8")
    return True


# -- the simulated model of `revtree demo --llm` ------------------------------------------
_NUMBER = re.compile(r"(?<![\w.])(\d+\.\d+)(?![\w.])")
_FACTORS = (1.15, 0.85, 1.3, 0.75, 1.05, 0.95)


class DemoResponder:
    """A ``FakeLLMServer`` responder that plays the agents' models: each coder answer
    changes one decimal number of the first editable file by a factor (between
    EVOLVE-BLOCK markers where the file has them), in turn over the lines that hold one.
    ``answers`` keeps (role, answer) of every call, for showing."""

    def __init__(self) -> None:
        self.edits = 0
        self.answers: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, req: FakeRequest) -> str:
        role = _role(req)
        with self.lock:
            if role == "proposer":
                text = (
                    "HYPOTHESIS: a constant of the model is off; scaling one of them by a "
                    "small factor should lower the error\nPLAN:\n1. pick one numeric "
                    "constant in the editable file\n2. scale it by 0.75 to 1.3"
                )
            elif role == "reviewer":
                text = "VERDICT: accept\nREASONS: a small change of one constant, in scope"
            elif role in ("coder", "repair"):
                text = self._edit(req)
            else:
                text = "ok"
            self.answers.append((role, text))
        return text

    def _edit(self, req: FakeRequest) -> str:
        found = re.search(r"^Editable files: (.+)$", req.user, re.M)
        globs = [g.strip() for g in found.group(1).split(",")] if found else []
        shown = re.findall(r"^--- (\S+) ---$", req.system + "\n" + req.user, re.M)
        path = next((p for p in shown if any(fnmatch.fnmatch(p, g) for g in globs)), "")
        text = current_file(req, path) if path else None
        if not text:
            return "I found no editable file to change."
        lines = text.splitlines()
        start, end = 0, len(lines)
        marks = [i for i, ln in enumerate(lines) if "EVOLVE-BLOCK-" in ln]
        if len(marks) >= 2:
            start, end = marks[0] + 1, marks[1]
        candidates = [
            i
            for i in range(start, end)
            if _NUMBER.search(lines[i]) and not lines[i].lstrip().startswith("#")
        ]
        if not candidates:
            return f"{path} has no decimal constant to change."
        line = lines[candidates[self.edits % len(candidates)]]
        factor = _FACTORS[self.edits % len(_FACTORS)]
        self.edits += 1
        m = _NUMBER.search(line)
        assert m is not None
        value = f"{float(m.group(1)) * factor:.4g}"
        value += "" if "." in value or "e" in value else ".0"
        new = line[: m.start()] + value + line[m.end() :]
        return f"{path}\n<<<<<<< SEARCH\n{line}\n=======\n{new}\n>>>>>>> REPLACE\n"


def _role(req: FakeRequest) -> str:
    if "research lead" in req.system:
        return "proposer"
    if "review a change" in req.system:
        return "reviewer"
    if "could not be applied" in req.user:
        return "repair"
    if "Editable files:" in req.user and "Write the edits" in req.user:
        return "coder"
    return "other"
