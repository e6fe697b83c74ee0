"""The one test command: .ci/run runs the README's, and every pytest session ends with
which test groups ran and which were skipped, and why (tests/conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import group_summary, resource_groups

ROOT = Path(__file__).resolve().parent.parent


def readme_test_command() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(blocks) >= 2, "README's 'Two commands' lost its second bash block"
    lines = blocks[1].strip().splitlines()
    assert len(lines) == 1, "the README's test command is one line"
    return lines[0]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    code = [ln for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert code[-1] == readme_test_command()
    assert code[:2] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."']
    # at most the line that makes the groups required, between the cd and the command
    assert code[2:-1] in ([], ["export REVTREE_REQUIRE=docker,postgres,browser,ray,compat,bwrap"])
    script = ROOT / readme_test_command().split()[0]
    assert script.is_file() and os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_groups_come_from_the_markers_that_say_what_they_need() -> None:
    markers = ["slow: end-to-end", "docker: needs an engine", "postgres: needs a server (X)"]
    assert resource_groups(markers) == ["docker", "postgres"]


def test_the_summary_counts_each_group_and_says_why_it_skipped() -> None:
    results = [
        ("t::a", "passed", {"docker"}, ""),
        ("t::b", "passed", {"docker"}, ""),
        ("t::c", "skipped", {"postgres"}, "REVTREE_TEST_PG is not set"),
        ("t::d", "skipped", {"postgres"}, "REVTREE_TEST_PG is not set"),
        ("t::e", "passed", set(), ""),
        ("t::e", "error", set(), ""),  # passed its call, failed its teardown
        ("t::f", "skipped", set(), "needs root"),
        ("t::g", "deselected", {"postgres"}, ""),
    ]
    lines, missed = group_summary(results, ["docker", "postgres"], {}, set())
    assert lines == [
        "docker:   ran (2 passed)",
        "postgres: skipped (REVTREE_TEST_PG is not set), 2 tests, 1 deselected",
        "other:    ran (1 error, 1 skipped: needs root)",
    ]
    assert not missed
    note = {"postgres": "no PostgreSQL: apt-get not available"}
    lines, missed = group_summary(results, ["docker", "postgres"], note, {"postgres"})
    assert lines[1].startswith("postgres: skipped (no PostgreSQL: apt-get not available)")
    assert "REQUIRED" in lines[1] and missed


def pytest_on(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest ARGS in a subprocess on ``folder``, with the repository's conftest as a
    plugin."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("REVTREE_TEST_NOTE_")}
    environ.pop("REVTREE_REQUIRE", None)
    environ.update(
        PYTHONPATH=str(ROOT), REVTREE_TEST_IMAGES_LOCK=str(folder / "images.lock"), **env
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",
            *args,
        ],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


# under xdist the controller runs nothing: the workers' reports, deselections and end
# lines must reach it (tests/conftest.py), and scripts/test runs with -n
@pytest.mark.slow  # a nested pytest session per way, 5-10 s (issue 24)
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_pytest_session_ends_with_the_groups_and_the_reasons(
    tmp_path: Path, workers: list[str]
) -> None:
    (tmp_path / "pytest.ini").write_text(
        textwrap.dedent("""\
        [pytest]
        addopts = --strict-markers
        markers =
            slow: end-to-end
            docker: needs a Docker engine
            postgres: needs a PostgreSQL server
        """)
    )
    (tmp_path / "test_tiny.py").write_text(
        textwrap.dedent("""\
        import pytest
        from tests.conftest import END_LINES

        @pytest.mark.postgres
        @pytest.mark.parametrize("n", [1, 2])
        def test_on_a_server(n):
            pytest.skip("REVTREE_TEST_PG is not set (no PostgreSQL server to test on)")

        @pytest.mark.docker
        def test_in_a_container():
            pass

        def test_plain(request):
            request.config.stash.setdefault(END_LINES, []).append("compat: 3 keys mapped")

        @pytest.mark.slow
        @pytest.mark.postgres
        def test_slow_on_a_server():
            pass
        """)
    )
    proc = pytest_on(tmp_path, *workers, "-m", "not slow")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "test groups: ran or skipped, and why" in out
    assert "docker:   ran (1 passed)" in out
    assert (
        "postgres: skipped (REVTREE_TEST_PG is not set (no PostgreSQL server to test on)), "
        "2 tests, 1 deselected" in out
    )
    assert "other:    ran (1 passed)" in out
    assert out.count("compat: 3 keys mapped") == 1

    why = "no PostgreSQL: apt-get is not available"
    proc = pytest_on(
        tmp_path,
        *workers,
        "-m",
        "not slow",
        REVTREE_TEST_NOTE_POSTGRES=why,
        REVTREE_REQUIRE="postgres",
    )
    assert f"postgres: skipped ({why}), 2 tests, 1 deselected -- REQUIRED" in proc.stdout
    assert proc.returncode == 1, "a required group that skipped must fail the session"


def test_the_script_stops_when_a_required_group_cannot_be_provisioned(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text("#!/bin/sh\nexit 1\n")  # installed, but no engine answers
    (fake / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    env.pop("REVTREE_REQUIRE", None)
    proc = subprocess.run(
        [str(ROOT / "scripts" / "test"), "--require", "docker,postgres"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "docker is required (REVTREE_REQUIRE) but no Docker: no engine answers" in proc.stderr
    assert "All checks passed" not in proc.stdout  # it stopped before ruff, mypy, pytest
