"""The import direction of ARCHITECTURE.md, checked on the source of every module.

Each module under ``revtree/`` is parsed with ``ast``; every import counts, including
those inside functions and relative ones. ``from a.b import c`` is read as importing
``a.b.c`` (a submodule or a name of ``a.b``), so ``from revtree.memory import Store``
is an import of the Store while ``from revtree.memory.records import Node`` is not.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import revtree
from revtree.sandboxes.env import is_secret, sandbox_env

PACKAGE = Path(revtree.__file__).parent
DOC = PACKAGE.parent / "docs" / "architecture.md"
MAX_LINES = 500  # per module, migrations excluded
MAX_PUBLIC_METHODS = 15  # per class
WIDE_BY_NATURE = {"revtree.memory.store.Store"}  # a storage contract is wide (as Optuna's)


def may_import_table(text: str) -> dict[str, tuple[str, tuple[str, ...] | None, set[str] | None]]:
    """The "may import" table of docs/architecture.md: layer -> (row, the revtree modules
    it may import or None for anything, the third-party packages it may import or None
    for any)."""
    section = text.split("## May import", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`revtree"):
            continue
        layer = cells[0].strip("`")
        names = tuple(n for n in cells[1].split("`")[1::2])
        revtree_ok = None if cells[1].startswith("anything") else names
        third = None if cells[2] == "any" else set(cells[2].split("`")[1::2])
        rows[layer] = (cells[1], revtree_ok, third)
    return rows


TABLE = may_import_table(DOC.read_text(encoding="utf-8"))
# layer -> the revtree modules it may import (besides itself); None: anything
ALLOWED: dict[str, tuple[str, ...] | None] = {k: v[1] for k, v in TABLE.items()}
THIRD_PARTY_ALLOWED = {k: v[2] for k, v in TABLE.items() if v[2] is not None}
MAY_IMPORT_CLI = tuple(k for k, v in TABLE.items() if v[0] == "anything")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(source: str, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, imported dotted name) for every import in ``source``."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, base if alias.name == "*" else f"{base}.{alias.name}"


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(module: str) -> str | None:
    return next((layer for layer in ALLOWED if _within(module, layer)), None)


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    layer = layer_of(module)
    out = []
    for line, name in imports(source, module, is_package):
        where = f"{module}:{line} imports {name}"
        if _within(name, "revtree.cli") and not any(_within(module, m) for m in MAY_IMPORT_CLI):
            out.append(f"{where} (only the CLI and the web app may)")
            continue
        if layer is None or ALLOWED[layer] is None:
            continue
        allowed = (layer, *(ALLOWED[layer] or ()))
        if _within(name, "revtree"):
            if name != "revtree" and not any(_within(name, a) for a in allowed):
                out.append(f"{where} (a {layer} module may import only {allowed})")
        elif layer in THIRD_PARTY_ALLOWED:
            root = name.split(".")[0]
            if root not in sys.stdlib_module_names and root not in THIRD_PARTY_ALLOWED[layer]:
                out.append(
                    f"{where} (a {layer} module may import only the stdlib "
                    f"and {sorted(THIRD_PARTY_ALLOWED[layer])})"
                )
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_package_is_covered():
    assert len(MODULES) > 15
    for path in MODULES:
        name = module_name(path)
        if name not in ("revtree",):
            assert layer_of(name) is not None, f"{name} belongs to no layer of ARCHITECTURE.md"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_import_direction(path):
    found = violations(
        path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py"
    )
    assert found == []


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(source: str, module: str, is_package: bool = False) -> list[str]:
    """Uses of another revtree module's private names: ``from m import _x``, and
    ``alias._x`` where ``alias`` is a revtree module imported here."""
    out, aliases = [], {}
    for line, name in imports(source, module, is_package):
        base, _, leaf = name.rpartition(".")
        if _within(name, "revtree") and _private(leaf) and base != module:
            out.append(f"{module}:{line} imports {name}")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _within(alias.name, "revtree"):
                    aliases[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("revtree"):
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            out.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_module_uses_another_modules_private_names(path):
    found = private_uses(
        path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py"
    )
    assert found == []


@pytest.mark.parametrize(
    ("module", "source", "caught"),
    [
        ("revtree.cli.x", "from revtree.orchestrator.run import _alive\n", True),
        ("revtree.cli.x", "from revtree.orchestrator import run\nrun._alive(1, 'h')\n", True),
        ("revtree.cli.x", "import revtree.sandboxes.docker as sd\nsd._start_time()\n", True),
        ("revtree.cli.x", "from ..orchestrator.run import _alive\n", True),
        ("revtree.cli.x", "from revtree.orchestrator.run import alive\n", False),
        ("revtree.cli.x", "def _mine():\n    pass\n_mine()\nself._x = 1\n", False),
        ("revtree.cli.x", "from revtree.memory import Store\nStore.__init__\n", False),
    ],
)
def test_the_private_name_check_can_fail(module, source, caught):
    assert bool(private_uses(source, module)) is caught


SIZED = [p for p in MODULES if "migrations" not in p.relative_to(PACKAGE).parts]


@pytest.mark.parametrize("path", SIZED, ids=lambda p: module_name(p))
def test_no_module_is_over_the_line_limit(path):  # migrations: generated history, exempt
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module_name(path)} has {lines} lines (> {MAX_LINES}): split it"


def public_methods(source: str) -> dict[str, int]:
    """Class name -> its public methods (properties included, dunders not)."""
    return {
        node.name: sum(
            1
            for f in node.body
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and not f.name.startswith("_")
        )
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    }


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_class_has_too_many_public_methods(path):
    module = module_name(path)
    wide = {
        name: n
        for name, n in public_methods(path.read_text(encoding="utf-8")).items()
        if n > MAX_PUBLIC_METHODS and f"{module}.{name}" not in WIDE_BY_NATURE
    }
    assert wide == {}, f"classes of {module} with more than {MAX_PUBLIC_METHODS} public methods"


def test_the_size_checks_can_fail():
    many = "class A:\n" + "".join(f"    def m{i}(self): pass\n" for i in range(16))
    assert public_methods(many) == {"A": 16}
    assert public_methods("class B:\n    def _p(self): pass\n    def __len__(self): pass\n") == {
        "B": 0
    }


def test_the_table_is_read_from_the_living_document():
    assert ALLOWED["revtree.tasks"] == ("revtree.errors",)
    assert ALLOWED["revtree.orchestrator"] is None
    assert "revtree.memory.records" in (ALLOWED["revtree.agents"] or ())
    assert THIRD_PARTY_ALLOWED["revtree.tasks"] == {"pydantic", "yaml"}
    assert "revtree.cli" in MAY_IMPORT_CLI and "revtree.orchestrator" not in MAY_IMPORT_CLI


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("revtree.agents.x", "def f():\n    from revtree.memory.store import Store\n"),
        ("revtree.agents.x", "from revtree.memory import Store\n"),
        ("revtree.agents.x", "import revtree.memory.db\n"),
        ("revtree.agents.x", "from ..memory import gitstore\n"),
        ("revtree.agents.x", "from revtree.orchestrator import run\n"),
        ("revtree.tasks.x", "import sqlalchemy\n"),
        ("revtree.tasks.x", "class A:\n    def f(self):\n        import revtree.sandboxes\n"),
        ("revtree.sandboxes.x", "from revtree.memory.records import Node\n"),
        ("revtree.memory.x", "from revtree.agents.base import Proposal\n"),
        ("revtree.memory.x", "from revtree import cli\n"),
        ("revtree.orchestrator.x", "import revtree.cli\n"),
        ("revtree.errors", "import pydantic\n"),
    ],
)
def test_the_checker_catches_violations(module, source):
    assert violations(source, module) != []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("revtree.agents.x", "from revtree.memory.records import Node\n"),
        ("revtree.agents.x", "from ..memory import records\nfrom . import base\n"),
        ("revtree.agents.x", "import optuna\nfrom revtree.sandboxes.base import Limits\n"),
        ("revtree.tasks.x", "import re, tomllib\nfrom pydantic import BaseModel\n"),
        ("revtree.memory.x", "import git\nfrom revtree.tasks.spec import TaskSpec\n"),
        ("revtree.orchestrator.x", "from revtree.memory.store import Store\n"),
        ("revtree.web.app", "from revtree.cli import main\n"),
    ],
)
def test_the_checker_allows_what_is_allowed(module, source):
    assert violations(source, module) == []


SECRET_NAMES = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "GEMINI_APIKEY",
    "GITHUB_TOKEN",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SESSION_TOKEN",
    "DATABASE_URL",
    "REVTREE_DB",
    "PGPASSWORD",
    "MYSQL_PASSWD",
    "SENTRY_DSN",
    "SSH_AUTH_SOCK",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "DEPLOY_PRIVATE_KEY",
    "CLIENT_SECRET",
    "openai_api_key",
    "NPM_AUTH",
    "DOCKER_CREDENTIALS",
]
HARMLESS_NAMES = [
    "PATH",
    "HOME",
    "LANG",
    "TZ",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "PYTHONHASHSEED",
    "REVTREE_METRICS",
    "REVTREE_SEED",
    "REVTREE_STAGE",
    "SEED",
    "BATCH_SIZE",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names_are_flagged(name):
    assert is_secret(name)


@pytest.mark.parametrize("name", HARMLESS_NAMES)
def test_harmless_names_pass(name):
    assert not is_secret(name)


def test_sandbox_env_drops_secrets_even_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = sandbox_env({name: "x" for name in [*SECRET_NAMES, "EXTRA"]}, tmp_path, tmp_path)
    assert not [name for name in env if is_secret(name)]
    assert env["EXTRA"] == "x" and env["LANG"] == "C.UTF-8"
    assert env["HOME"] == str(tmp_path)


# ---- one place for the stage names and the metric's direction -------------------------

STAGES = ("FULL", "GUARD", "HOLDOUT")
STAGES_HOME = "revtree.memory.stages"
DIRECTION_HOME = "revtree.memory.records"  # directed() and Score, beside each other


def stage_sources(source: str, module: str, is_package: bool = False) -> list[str]:
    """Stage names defined or imported anywhere but :data:`STAGES_HOME`."""
    out = []
    if module != STAGES_HOME:
        for line, name in imports(source, module, is_package):
            base, _, leaf = name.rpartition(".")
            if leaf in STAGES and base != STAGES_HOME:
                out.append(f"{module}:{line} imports {leaf} from {base}, not {STAGES_HOME}")
        for node in ast.parse(source).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                if isinstance(t, ast.Name) and t.id in STAGES:
                    out.append(f"{module}:{node.lineno} defines {t.id}")
    return out


def _on_direction(test: ast.expr) -> bool:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", "")
    return isinstance(name, str) and name.lower().startswith(("maximi", "minimi"))


def _negated(e: ast.expr) -> bool:
    return isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub)


def hand_directions(source: str, module: str) -> list[str]:
    """Conditional expressions on the direction (``maximize``, ``spec.maximize``) that
    write its sign by hand: ``x if maximize else -x``, ``1.0 if maximize else -1.0``,
    ``a > b if maximize else a < b``. ``directed`` beside ``Score`` is the one place."""
    if module == DIRECTION_HOME:
        return []
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.IfExp) and _on_direction(node.test)):
            continue
        a, b = node.body, node.orelse
        compared = isinstance(a, ast.Compare) and isinstance(b, ast.Compare)
        if _negated(a) or _negated(b) or compared:
            out.append(f"{module}:{node.lineno} writes the direction by hand: use directed()")
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_stage_names_come_from_one_module(path):
    source = path.read_text(encoding="utf-8")
    assert stage_sources(source, module_name(path), path.name == "__init__.py") == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_the_direction_is_written_in_one_place(path):
    assert hand_directions(path.read_text(encoding="utf-8"), module_name(path)) == []


@pytest.mark.parametrize(
    ("module", "source", "caught"),
    [
        ("revtree.web.x", "from revtree.agents.evaluator import FULL\n", True),
        ("revtree.web.x", "from revtree.memory.records import GUARD as G\n", True),
        ("revtree.orchestrator.x", "HOLDOUT = 'holdout'\n", True),
        ("revtree.web.x", "from revtree.memory.stages import FULL, GUARD\n", False),
        ("revtree.web.x", "from ..memory.stages import HOLDOUT\n", False),
        ("revtree.memory.stages", "FULL = 'full'\n", False),
    ],
)
def test_the_stage_check_can_fail(module, source, caught):
    assert bool(stage_sources(source, module)) is caught


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("k = x if maximize else -x\n", True),
        ("k = -x if not spec.maximize else x\n", True),  # the test's name, negated or not
        ("sign = 1.0 if self.maximize else -1.0\n", True),
        ("b = s > t if maximize else s < t\n", True),
        ("k = directed(x, maximize)\n", False),
        ("d = 'maximize' if maximize else 'minimize'\n", False),
        ("f = max if spec.maximize else min\n", False),
        ("k = x if flag else -x\n", False),
    ],
)
def test_the_direction_check_can_fail(source, caught):
    assert bool(hand_directions(source, "revtree.orchestrator.x")) is caught
