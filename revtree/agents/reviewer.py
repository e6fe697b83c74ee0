"""The static reviewer: the scope of a change, then the mechanical reward hacks in it.

It runs before any evaluation and is pure (the same change always gets the same
verdict). A change is rejected, with every reason named, when

- it touches a protected or otherwise non-editable file (the paths alone decide), or
- a line it ADDS to an editable file trips one of :data:`RULES` (the diff decides):
  reaching a protected or holdout file by name, importing the evaluator, an exit hook,
  a hard exit, the ``__main__`` module, walking stack frames, a metrics or grader file
  or descriptor, printing the task's metric, monkeypatching a module, ``REVTREE_``
  variables or environment writes, ``gc`` object walks, ``ctypes``, or a new file that
  shadows a module the evaluator may import. Each flag names the file, the line and
  the rule.

What is covered: Python files are read with Python's own tokenizer over each hunk's
new text, so a comment never trips a rule and a string literal is told apart from a
name (``if __name__ == "__main__":`` is fine, ``sys.modules["__main__"]`` is not).
Lines of a hunk that does not tokenize are matched with regexes instead. Shell, C and
other script files get the string rules only, by regex; documents and data files are
not read. Code that was already in the parent never counts against the candidate.

What is not covered: hard-coded answers, special-cased inputs, answers cached from an
earlier evaluation, and anything assembled at run time (a file name built from pieces,
``getattr`` with a computed name, ``exec`` of an encoded string). Those are for the
LLM review, a grade step (``[evaluate.grade]``) and the holdout drift alarm.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import posixpath
import re
import sys
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from revtree.agents.base import Change, Job, Proposal, Verdict
from revtree.tasks.names import matches
from revtree.tasks.spec import TaskSpec

RULES: dict[str, str] = {
    "protected-file": "names a protected or holdout file",
    "evaluator-import": "imports or loads the evaluator",
    "atexit": "registers an exit hook",
    "hard-exit": "ends or signals a process outside normal control flow",
    "main-module": "reaches the __main__ module (the evaluator's own namespace)",
    "frame-walk": "walks stack frames or installs a tracer to reach the caller",
    "scoring-file": "names a metrics or grader file, or a file descriptor path",
    "metric-print": "prints or writes the task's metric itself",
    "monkeypatch": "assigns to an attribute of a module (timers, libraries, builtins)",
    "environment": "reads a REVTREE_ variable or writes the environment",
    "gc-objects": "walks the garbage collector's objects",
    "ctypes": "uses ctypes or cffi",
    "shadow-module": "adds a file named like a module the evaluator may import",
}
# Modules whose attributes a candidate has no business assigning to.
PATCHABLE = frozenset(
    {
        "builtins", "collections", "datetime", "functools", "gc", "heapq", "importlib",
        "itertools", "json", "math", "np", "numpy", "operator", "os", "pandas", "pd",
        "random", "scipy", "sklearn", "statistics", "subprocess", "sys", "time", "timeit",
        "torch",
    }
)  # fmt: skip
THIRD_PARTY = frozenset({"numpy", "scipy", "pandas", "torch", "sklearn", "pytest", "yaml"})
HOOK_FILES = frozenset({"sitecustomize", "usercustomize", "conftest"})
FRAME_NAMES = frozenset(
    {"_getframe", "currentframe", "getouterframes", "getinnerframes", "f_back", "f_globals",
     "f_locals", "tb_frame", "settrace", "setprofile", "extract_stack", "walk_stack"}
)  # fmt: skip
GC_NAMES = frozenset({"get_objects", "get_referrers", "get_referents"})
ENV_WRITES = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__"})
LOADERS = frozenset(
    {"import_module", "__import__", "run_module", "run_path", "reload",
     "spec_from_file_location", "SourceFileLoader"}
)  # fmt: skip
PATH_CALLS = frozenset(
    {"open", "Path", "join", "listdir", "glob", "iglob", "scandir", "walk", "read_text",
     "read_bytes", "loadtxt", "genfromtxt", "read_csv", "fromfile", "iterdir", "exists",
     "isfile"}
)  # fmt: skip
OUTPUT_CALLS = frozenset({"print", "write", "writelines", "dump", "dumps"})
SCORING_NAMES = (
    "metrics*.*", "*_metrics.*", "*-metrics.*", "grade*.py", "grader*", "evaluat*.py",
    "eval.py", "score*.json", "scores*.json",
)  # fmt: skip
DEVICE_PATH = re.compile(r"^/(dev/fd|proc/self/fd|proc/self/environ|proc/\d+|proc/\{)")
SCRIPT_SUFFIXES = (".sh", ".bash", ".c", ".cc", ".cpp", ".h", ".hpp", ".rs", ".go", ".js",
                   ".ts", ".jl", ".r", ".pl", ".rb")  # fmt: skip
_SKIP = (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)


@dataclass(frozen=True)
class Flag:
    """One added line that trips one rule."""

    path: str
    line: int
    rule: str
    text: str

    def __str__(self) -> str:
        snippet = " ".join(self.text.split())[:100]
        return f"{self.path}:{self.line}: {self.rule} ({RULES[self.rule]}): {snippet}"


@dataclass
class FileDiff:
    """The added side of one file's diff: (new line number, text, added) per hunk."""

    path: str
    new_file: bool = False
    binary: bool = False
    hunks: list[list[tuple[int, str, bool]]] = field(default_factory=list)

    def added(self) -> Iterator[tuple[int, str]]:
        for hunk in self.hunks:
            yield from ((n, t) for n, t, add in hunk if add)


def _unquote(path: str) -> str:
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return path


def parse_diff(diff: str) -> list[FileDiff]:
    """The files of a ``git diff`` with the new-side lines of each hunk."""
    files: list[FileDiff] = []
    lines, i = diff.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("diff --git "):
            m = re.match(r'diff --git (?:"?a/.*?"?) ("?b/.*"?)$', line)
            target = _unquote(m.group(1)) if m else line.rsplit(" b/", 1)[-1]
            files.append(FileDiff(target[2:] if target.startswith("b/") else target))
        elif not files:
            continue
        elif line.startswith("new file mode"):
            files[-1].new_file = True
        elif line.startswith(("GIT binary patch", "Binary files ")):
            files[-1].binary = True
        elif line.startswith("+++ ") and line[4:] != "/dev/null":
            files[-1].path = _unquote(line[4:])[2:]
        elif m := re.match(r"@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", line):
            old_left = int(m.group(1) or 1)
            new_no, new_left = int(m.group(2)), int(m.group(3) or 1)
            hunk: list[tuple[int, str, bool]] = []
            while i < len(lines) and (old_left > 0 or new_left > 0):
                body, i = lines[i], i + 1
                tag, text = body[:1], body[1:]
                if tag == "+":
                    hunk.append((new_no, text, True))
                    new_no, new_left = new_no + 1, new_left - 1
                elif tag == "-":
                    old_left -= 1
                elif tag == "\\":
                    continue
                else:  # context (a blank context line may have lost its space)
                    hunk.append((new_no, text, False))
                    new_no, new_left, old_left = new_no + 1, new_left - 1, old_left - 1
            files[-1].hunks.append(hunk)
    return files


def _string_value(token: str) -> str:
    try:
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = re.sub(r"^[A-Za-z]*(\"\"\"|'''|\"|')|(\"\"\"|'''|\"|')$", "", token)
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else str(value)


def _statements(hunk: list[tuple[int, str, bool]]) -> list[list[tokenize.TokenInfo]] | None:
    """The logical lines of a hunk's new text (token line numbers are file line numbers),
    or None when it does not tokenize on its own."""
    if not hunk:
        return []
    texts = [t for _, t, _ in hunk]
    indent = min((len(t) - len(t.lstrip()) for t in texts if t.strip()), default=0)
    source = "\n".join(t[indent:] if t[:indent].isspace() else t.lstrip() for t in texts)
    offset = hunk[0][0] - 1
    out: list[list[tokenize.TokenInfo]] = [[]]
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source + "\n").readline):
            if tok.type in _SKIP:
                continue
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                out.append([])
                continue
            row = tok.start[0] + offset
            out[-1].append(tok._replace(start=(row, tok.start[1]), end=(row, tok.end[1])))
    except (tokenize.TokenError, SyntaxError):
        return None
    return [s for s in out if s]


class _Scanner:
    """The rules, bound to one task's protected files and metric."""

    def __init__(self, spec: TaskSpec) -> None:
        self.editable = spec.editable
        self.guarded = spec.protected + (spec.holdout.files if spec.holdout else ())
        self.guarded += tuple(spec.support_files)
        names = {posixpath.basename(g) for g in self.guarded}
        self.basenames = {n for n in names if not any(c in n for c in "*?[")}
        self.dirs = {
            posixpath.dirname(g) for g in self.guarded if not any(c in g for c in "*?[")
        } | {g.split("/", 1)[0] for g in self.guarded if "/" in g}
        self.dirs = {d for d in self.dirs if d and not any(c in d for c in "*?[")}
        self.stems = {n[:-3] for n in self.basenames if n.endswith(".py")}
        self.metrics = {spec.evaluate.metric}
        if spec.holdout and spec.holdout.metric:
            self.metrics.add(spec.holdout.metric)

    # -- files ------------------------------------------------------------------------
    def scan(self, diff: str) -> list[Flag]:
        flags: list[Flag] = []
        for f in parse_diff(diff):
            if f.binary or not matches(f.path, self.editable):
                continue  # non-editable paths are the path check's business
            if f.new_file and (why := self._shadows(f.path)):
                flags.append(Flag(f.path, 1, "shadow-module", why))
            if f.path.endswith(".py"):
                flags += self._python(f)
            elif f.path.lower().endswith(SCRIPT_SUFFIXES):
                for n, text in f.added():
                    flags += self._raw_strings(f.path, n, text)
        return flags

    def _shadows(self, path: str) -> str | None:
        parts = path.split("/")
        if path.endswith(".pth"):
            return f"new path-configuration file {path}"
        if len(parts) == 1 and path.endswith(".py"):
            stem = path[:-3]
        elif len(parts) == 2 and parts[1] == "__init__.py":
            stem = parts[0]
        else:
            return None
        if stem in HOOK_FILES or stem in self.stems:
            return f"new file {path} shadows {stem!r}, which Python or the evaluator loads"
        if stem in sys.stdlib_module_names or stem in THIRD_PARTY:
            return f"new file {path} shadows the module {stem!r}"
        return None

    def _python(self, f: FileDiff) -> list[Flag]:
        flags: list[Flag] = []
        for hunk in f.hunks:
            added = {n: t for n, t, add in hunk if add}
            if not added:
                continue
            statements = _statements(hunk)
            if statements is None:
                for n, text in added.items():
                    flags += self._raw_strings(f.path, n, text) + self._raw_code(f.path, n, text)
                continue
            for stmt in statements:
                flags += [
                    Flag(f.path, tok.start[0], rule, added[tok.start[0]])
                    for tok, rule in self._statement(stmt)
                    if tok.start[0] in added
                ]
        return _dedupe(flags)

    # -- one logical line -------------------------------------------------------------
    def _statement(
        self, toks: list[tokenize.TokenInfo]
    ) -> Iterator[tuple[tokenize.TokenInfo, str]]:
        words = [t.string for t in toks]
        names = {t.string for t in toks if t.type == tokenize.NAME}
        is_import = words[0] in ("import", "from")
        for i, tok in enumerate(toks):
            prev = words[i - 1] if i else ""
            prev2 = words[i - 2] if i > 1 else ""
            if tok.type == tokenize.STRING:
                yield from ((tok, r) for r in self._string_rules(tok.string, names, toks, i))
            elif tok.type != tokenize.NAME:
                continue
            elif rule := self._name_rule(tok.string, prev, prev2, is_import, words, i):
                yield tok, rule
        if rule := self._assignment_rule(words):
            yield toks[0], rule

    def _name_rule(
        self, name: str, prev: str, prev2: str, is_import: bool, words: list[str], i: int
    ) -> str | None:
        attr = prev == "." or is_import
        if name == "atexit":
            return "atexit"
        if attr and (name == "_exit" or (prev2 == "os" and name in ("abort", "kill", "killpg"))):
            return "hard-exit"
        if name == "getppid":
            return "hard-exit"
        if name == "__main__":
            return "main-module"
        if (name in FRAME_NAMES and attr) or (prev2 == "inspect" and name in ("stack", "trace")):
            return "frame-walk"
        if name in GC_NAMES and attr:
            return "gc-objects"
        if name in ("ctypes", "cffi"):
            return "ctypes"
        if "REVTREE_" in name or name == "__builtins__":
            return "environment" if "REVTREE_" in name else "monkeypatch"
        if name in ("putenv", "unsetenv") and attr:
            return "environment"
        if name == "environ" and (prev2 == "os" or not attr) and self._env_write(words, i):
            return "environment"
        if name == "setattr" and i + 2 < len(words) and words[i + 1] == "(":
            target = words[i + 2]
            if target in PATCHABLE or target in self.stems or target == "sys":
                return "monkeypatch"
        if is_import and name in self.stems and prev in ("import", "from", ",", "."):
            return "evaluator-import" if prev != "." else None
        return None

    @staticmethod
    def _env_write(words: list[str], i: int) -> bool:
        if words[0] == "del":
            return True
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if nxt == "." and i + 2 < len(words):
            return words[i + 2] in ENV_WRITES
        if nxt == "[":
            depth = 0
            for j in range(i + 1, len(words)):
                depth += {"[": 1, "]": -1}.get(words[j], 0)
                if depth == 0:
                    return j + 1 < len(words) and words[j + 1] == "="
        return False

    def _assignment_rule(self, words: list[str]) -> str | None:
        """``module.attr[.attr] = ...`` or ``sys.modules[...] = ...`` at statement start."""
        if len(words) < 4 or words[0] not in PATCHABLE | self.stems:
            return None
        j = 1
        while j + 1 < len(words) and words[j] == "." and words[j + 1].isidentifier():
            j += 2
        if j == 1:
            return None
        if words[j] == "=":
            return "monkeypatch"
        if words[j] == "[" and words[:3] == ["sys", ".", "modules"] and "=" in words[j:]:
            return "monkeypatch"
        return None

    def _string_rules(
        self, token: str, names: set[str], toks: list[tokenize.TokenInfo], i: int
    ) -> Iterator[str]:
        value = _string_value(token)
        if "REVTREE_" in value:
            yield "environment"
        if value == "__main__" and names & ({"modules"} | LOADERS):
            yield "main-module"
        if value in self.stems and names & LOADERS:
            yield "evaluator-import"
        if self._scoring(value):
            yield "scoring-file"
        elif self._protected(value, names):
            yield "protected-file"
        nxt = toks[i + 1].string if i + 1 < len(toks) else ""
        quoted = any(f'"{m}"' in value or f"'{m}'" in value for m in self.metrics)
        if names & OUTPUT_CALLS and ((value in self.metrics and nxt == ":") or quoted):
            yield "metric-print"

    def _scoring(self, value: str) -> bool:
        if DEVICE_PATH.match(value):
            return True
        base = posixpath.basename(value.strip()).lower()
        return bool(base) and any(fnmatch.fnmatchcase(base, p) for p in SCORING_NAMES)

    def _protected(self, value: str, names: set[str]) -> bool:
        path = posixpath.normpath(value.strip()) if value.strip() else ""
        path = path.lstrip("/") if path.startswith("/") else path
        if not path or len(path) > 300 or "\n" in path:
            return False
        if matches(path, self.editable) and not matches(path, self.guarded):
            return False  # the candidate's own file
        base = posixpath.basename(path)
        if matches(path, self.guarded) or base in self.basenames:
            return True
        if any(c in base for c in "*?[") and any(
            fnmatch.fnmatchcase(b, base) for b in self.basenames
        ):
            return True
        top = path.split("/", 1)[0].lstrip(".")
        return (top in self.dirs or path in self.dirs) and (
            "/" in value or bool(names & PATH_CALLS)
        )

    # -- regex fallback ---------------------------------------------------------------
    def _raw_strings(self, path: str, line: int, text: str) -> list[Flag]:
        flags = []
        for m in re.finditer(r"""(["'])((?:(?!\1).){1,300})\1""", text):
            value = m.group(2)
            if "REVTREE_" in value:
                flags.append(Flag(path, line, "environment", text))
            if self._scoring(value):
                flags.append(Flag(path, line, "scoring-file", text))
            elif self._protected(value, set(re.findall(r"\w+", text)) & PATH_CALLS):
                flags.append(Flag(path, line, "protected-file", text))
        if "REVTREE_" in text and not any(f.rule == "environment" for f in flags):
            flags.append(Flag(path, line, "environment", text))
        if re.search(r"(?<![\w.])(/dev/fd/|/proc/self/fd)", text):
            flags.append(Flag(path, line, "scoring-file", text))
        return _dedupe(flags)

    def _raw_code(self, path: str, line: int, text: str) -> list[Flag]:
        code = re.sub(r"#.*$", "", text)
        checks = {
            "atexit": r"\batexit\b",
            "hard-exit": r"\bos\s*\.\s*_exit\b|\bgetppid\b",
            "main-module": r"\bimport\s+__main__|modules\s*\[\s*['\"]__main__",
            "frame-walk": r"\b_getframe\b|\binspect\s*\.\s*(stack|currentframe)\b|\.f_back\b",
            "gc-objects": r"\bgc\s*\.\s*get_(objects|referrers|referents)\b",
            "ctypes": r"\b(ctypes|cffi)\b",
            "environment": r"\bos\s*\.\s*environ\s*"
            r"(\[[^\]]*\]\s*=[^=]|\.\s*(update|setdefault|pop)\b)",
            "monkeypatch": r"^\s*(" + "|".join(sorted(PATCHABLE)) + r")(\.\w+)+\s*=[^=]",
        }
        return [Flag(path, line, rule, text) for rule, rx in checks.items() if re.search(rx, code)]


def _dedupe(flags: list[Flag]) -> list[Flag]:
    seen: set[tuple[str, int, str]] = set()
    out = []
    for f in flags:
        if (f.path, f.line, f.rule) not in seen:
            seen.add((f.path, f.line, f.rule))
            out.append(f)
    return out


MAX_REASONS = 12


class StaticReviewer:
    def __init__(self, spec: TaskSpec) -> None:
        self.editable, self.protected = spec.editable, spec.protected
        self.scanner = _Scanner(spec)

    def scan(self, diff: str) -> list[Flag]:
        """The rule flags of the lines ``diff`` adds to editable files."""
        return self.scanner.scan(diff)

    def review(self, job: Job, proposal: Proposal, change: Change) -> Verdict:
        """The static checks of the change (an acceptance is not stored on the node)."""
        verdict = self.check(change.paths, change.diff)
        return verdict if not verdict.accepted else Verdict(True, stored=False)

    def check(self, changed_paths: Iterable[str], diff: str = "") -> Verdict:
        """Rejects a change to non-editable paths, or whose added lines trip a rule."""
        changed = list(changed_paths)
        reasons = []
        protected = [p for p in changed if matches(p, self.protected)]
        if protected:
            reasons.append(f"touches protected file(s) {protected}")
        other = [p for p in changed if not matches(p, self.editable) and p not in protected]
        if other:
            reasons.append(f"touches non-editable file(s) {other}")
        flags = self.scan(diff) if diff else []
        reasons += [f"static check: {f}" for f in flags[:MAX_REASONS]]
        if len(flags) > MAX_REASONS:
            reasons.append(f"static check: and {len(flags) - MAX_REASONS} more flag(s)")
        return Verdict(accepted=not reasons, reasons=tuple(reasons))
