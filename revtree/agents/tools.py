"""The tools a coder calls while it works: search, read, list, run; and its edits.

A ``ToolBox`` works on one candidate's tree: a snapshot of the parent's files, less the
hidden ones (protected, holdout and support files), to which the coder's edits apply
as they are made, so ``read_file`` and ``run`` see them. ``call`` answers one tool
call with an ``Outcome``: the text given back to the model, and whether the call was
refused (unknown tool, bad arguments, a path outside the repository or into hidden
data, the count of runs spent). A refusal is an answer, never an exception: the model
reads why and goes on. ``misuse`` keeps the refusals for the live log.

What is covered: no tool ever returns a hidden file's content: ``read_file`` refuses
it by name, ``list_files`` and ``search_code`` do not know it, and ``run``'s workspace
is an archive of the visible tree only. Paths are relative posix paths inside the
repository. Each result is cut to ``RESULT_CHARS``.
What is not covered: ``run`` is read-only only in that its workspace is thrown away
after the command; within its timeout the command may do whatever the sandbox allows
(network and resources as for evaluations). Its time is not counted in the run's
``max_sandbox_seconds`` budget: ``max_runs`` runs of ``run_timeout`` per candidate bound it.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from revtree.agents.context import decode
from revtree.agents.edits import Edit, apply_edits
from revtree.agents.llm.base import Tool, ToolCall
from revtree.agents.outline import symbols_text
from revtree.agents.retrieval import Index, words
from revtree.errors import EditError, RevtreeError, SandboxError
from revtree.sandboxes.base import ExecResult
from revtree.tasks.names import matches
from revtree.tasks.spec import TaskSpec

RESULT_CHARS = 6000  # of each tool result given back to the model
READ_LINES = 200  # most lines one read_file returns
LIST_PATHS = 200  # most paths one list_files returns
SEARCH_HITS = 8
MATCH_LINES = 3  # matching lines shown per file found

Runner = Callable[[str, Mapping[str, bytes]], ExecResult]  # (command, tree) -> result


def _schema(**props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


SEARCH_CODE = Tool(
    "search_code",
    "Find the files of the repository most related to `query`, best first, with their "
    "matching lines. mode 'keyword' matches words and identifiers (exact names); "
    "'semantic' matches meaning (where an embeddings model is configured, else keyword).",
    _schema(
        query=_str("Words, identifiers or a description of what you look for."),
        mode={"type": "string", "enum": ["keyword", "semantic"]},
    ),
)
READ_FILE = Tool(
    "read_file",
    f"Read lines `start` to `end` (1-based, inclusive; end 0 for the end of the file) of "
    f"a file, with line numbers; at most {READ_LINES} lines a call.",
    _schema(
        path=_str("The file's path, relative to the repository."),
        start={"type": "integer", "description": "First line (1-based)."},
        end={"type": "integer", "description": "Last line, inclusive; 0 for the end."},
    ),
)
LIST_FILES = Tool(
    "list_files",
    "List the repository's files matching a glob ('**/*.py', 'lib/*'; '**' spans folders).",
    _schema(glob=_str("A glob over paths relative to the repository.")),
)
RUN = Tool(
    "run",
    "Run a read-only shell command (a check: tests, a quick script, grep) in a throw-away "
    "copy of the candidate's files with your edits so far; exit code and output tails "
    "come back. Short time limit, few runs per candidate; the evaluator is not there.",
    _schema(command=_str("The shell command.")),
)
DONE = Tool(
    "done",
    "Finish: your edits are complete. Call it alone once the last edit has applied.",
    _schema(summary=_str("One sentence: what you changed.")),
)


@dataclass(frozen=True)
class Outcome:
    """A tool call's answer: ``text`` for the model; ``ok`` false for a refusal."""

    call: ToolCall
    text: str
    ok: bool = True


def hidden_paths(spec: TaskSpec) -> Callable[[str], bool]:
    """Whether a path is hidden from the agents: protected, holdout or support files."""
    globs = (*spec.protected, *(spec.holdout.files if spec.holdout else ()))
    support = set(spec.support_files)
    return lambda path: matches(path, globs) or path in support


def archive(files: Mapping[str, bytes]) -> bytes:
    """A tar of ``files`` (regular files, mode 0644) for a sandbox workspace."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def cut(text: str, limit: int = RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters cut]"


class Refused(RevtreeError, ValueError):
    """A tool call the box does not carry out; its message goes back to the model."""


class ToolBox:
    """The tools over one candidate's tree (see the module docstring). ``runner`` runs a
    command over a tree in the run's sandbox; without one, ``run`` is not offered."""

    def __init__(
        self,
        files: Mapping[str, bytes],
        *,
        editable: Sequence[str],
        hidden: Callable[[str], bool],
        index: Index,
        runner: Runner | None = None,
        max_runs: int = 3,
    ) -> None:
        self.hidden, self.index, self.runner = hidden, index, runner
        self.editable, self.max_runs = tuple(editable), max_runs
        self.parent = {p: d for p, d in files.items() if not hidden(p)}
        self.tree = dict(self.parent)
        self.runs = 0
        self.used: Counter[str] = Counter()
        self.misuse: list[str] = []
        self.read: list[str] = []  # the files read, in order (once each)
        self._handlers: dict[str, Callable[[Mapping[str, Any]], str]] = {
            SEARCH_CODE.name: self._search,
            READ_FILE.name: self._read,
            LIST_FILES.name: self._list,
        }
        if runner is not None:
            self._handlers[RUN.name] = self._run

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The read-only tools offered (``run`` only with a runner)."""
        return (SEARCH_CODE, READ_FILE, LIST_FILES) + ((RUN,) if self.runner else ())

    @property
    def changes(self) -> dict[str, bytes]:
        """The files the edits changed, against the parent."""
        return {p: d for p, d in self.tree.items() if self.parent.get(p) != d}

    def call(self, call: ToolCall) -> Outcome:
        """Carry out a read-only tool call, or refuse it with the reason."""
        self.used[call.name] += 1
        handler = self._handlers.get(call.name)
        try:
            if handler is None:
                raise Refused(f"no tool {call.name!r}")
            return Outcome(call, cut(handler(call.arguments)))
        except Refused as e:
            return self.refuse(call, str(e))

    def refuse(self, call: ToolCall, why: str) -> Outcome:
        self.misuse.append(f"{call.name}: {why}"[:300])
        return Outcome(call, f"refused: {why}", ok=False)

    def edit(self, call: ToolCall, edits: Sequence[Edit]) -> Outcome:
        """Apply edits to the tree (editable globs and EVOLVE-BLOCK regions enforced)."""
        self.used[call.name] += 1
        try:
            changed = apply_edits(edits, self.tree, self.editable)
        except EditError as e:
            return self.refuse(call, f"the edit did not apply: {e}")
        self.tree.update(changed)
        if not changed:
            return Outcome(call, "applied, but it changes nothing")
        return Outcome(call, f"applied: {', '.join(sorted(changed))} changed")

    # -- the tools ----------------------------------------------------------------------
    def _search(self, args: Mapping[str, Any]) -> str:
        query, mode = _arg(args, "query", str), args.get("mode", "keyword")
        if mode not in ("keyword", "semantic"):
            raise Refused(f"mode must be 'keyword' or 'semantic', not {mode!r}")
        note = ""
        if mode == "semantic" and not self.index.semantic:
            note = "(semantic search is not configured here: keyword results)\n"
        hits = self.index.search(query, self.tree, k=SEARCH_HITS * 4)
        if mode == "keyword":
            hits = [h for h in hits if "keyword" in h.how]
        hits = hits[:SEARCH_HITS]
        if not hits:
            return note + f"no file matches {query!r}"
        terms = set(words(query))
        out = [note + f"{len(hits)} files for {query!r} ({mode}), best first:"]
        for i, h in enumerate(hits, 1):
            text = decode(self.tree[h.path]) or ""
            out.append(f"{i}. {h.path}  [{symbols_text(h.path, text)[:200] or '-'}]")
            out += [f"   {n}: {line.strip()[:160]}" for n, line in _matching(text, terms)]
        return "\n".join(out)

    def _read(self, args: Mapping[str, Any]) -> str:
        path = self._path(_arg(args, "path", str))
        start, end = _arg(args, "start", int, 1), _arg(args, "end", int, 0)
        if path not in self.tree:
            raise Refused(f"no file {path!r} in the repository (list_files shows them)")
        text = decode(self.tree[path])
        if text is None:
            raise Refused(f"{path!r} is a binary file ({len(self.tree[path])} bytes)")
        if path not in self.read:
            self.read.append(path)
        lines = text.splitlines()
        first = max(start, 1)
        last = min(len(lines) if end <= 0 else end, len(lines), first + READ_LINES - 1)
        if first > len(lines):
            raise Refused(f"{path!r} has {len(lines)} lines; start {start} is past its end")
        shown: list[str] = []
        left = RESULT_CHARS - 200
        for n in range(first, last + 1):
            row = f"{n:>5}  {lines[n - 1]}"
            if len(row) >= left and shown:
                last = n - 1
                break
            shown.append(row[:left])
            left -= len(row) + 1
        body = "\n".join(shown)
        more = f"\n[lines {last + 1}-{len(lines)} not shown]" if last < len(lines) else ""
        return f"{path}, lines {first}-{last} of {len(lines)}:\n{body}{more}"

    def _list(self, args: Mapping[str, Any]) -> str:
        glob = _arg(args, "glob", str).strip() or "**"
        found = sorted(p for p in self.tree if matches(p, (glob,)))
        if not found:
            return f"no file matches {glob!r}"
        more = len(found) - LIST_PATHS
        tail = f"\n[... {more} more; narrow the glob]" if more > 0 else ""
        return f"{len(found)} files match {glob!r}:\n" + "\n".join(found[:LIST_PATHS]) + tail

    def _run(self, args: Mapping[str, Any]) -> str:
        command = _arg(args, "command", str)
        if not command.strip():
            raise Refused("the command is empty")
        if self.runs >= self.max_runs:
            raise Refused(f"the {self.max_runs} runs of this candidate are spent")
        assert self.runner is not None
        self.runs += 1
        try:
            r = self.runner(command, self.tree)
        except SandboxError as e:
            raise Refused(f"the sandbox failed: {e}") from e
        status = "timed out" if r.timed_out else f"exit code {r.exit_code}"
        half = RESULT_CHARS // 2 - 200
        return (
            f"{status} ({r.duration:.1f} s; run {self.runs} of {self.max_runs})\n"
            f"stdout (tail):\n{r.stdout[-half:]}\nstderr (tail):\n{r.stderr[-half:]}"
        )

    def _path(self, raw: str) -> str:
        """A path inside the repository and not hidden, or a refusal saying why."""
        path = raw.strip().replace("\\", "/")
        norm = posixpath.normpath(path) if path else ""
        if not norm or path.startswith("/") or norm == ".." or norm.startswith("../"):
            raise Refused(f"{raw!r} is outside the repository: give a path relative to it")
        if self.hidden(norm):
            raise Refused(f"{norm!r} is protected evaluation data: it is never shown")
        return norm


def _arg(args: Mapping[str, Any], name: str, kind: type, default: Any = None) -> Any:
    """The argument ``name`` of type ``kind`` (``default`` when missing and given)."""
    if "_invalid" in args:
        raise Refused(f"the arguments are not a JSON object: {str(args['_invalid'])[:100]!r}")
    value = args.get(name, default)
    if value is None:
        raise Refused(f"the argument {name!r} is missing")
    if kind is int and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise Refused(f"the argument {name!r} must be a {kind.__name__}, not {value!r}"[:200])
    return value


def _matching(text: str, terms: set[str]) -> list[tuple[int, str]]:
    """The lines of ``text`` sharing the most of ``terms``, in file order."""
    scored = []
    for n, line in enumerate(text.splitlines(), 1):
        shared = len(terms & set(words(line)))
        if shared:
            scored.append((-shared, n, line))
    best = sorted(scored)[:MATCH_LINES]
    return sorted((n, line) for _, n, line in best)
