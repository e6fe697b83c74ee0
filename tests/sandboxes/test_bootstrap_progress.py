"""The base image's build shows progress: debootstrap's stages as phases with the time
spent and an estimate of what is left, one plain line each when not on a terminal;
a closed stderr or stdout never fails the build."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from revtree.errors import SandboxError
from revtree.sandboxes.images import _debootstrap, base_tag
from revtree.sandboxes.progress import STAGES, BuildProgress

# The "I:" lines of a real `debootstrap --variant=minbase` run (one of each kind)
TRANSCRIPT = """\
I: Retrieving InRelease
I: Checking Release signature
I: Valid Release signature (key id 4D64FEC119C2029067D6E791F8D2585B8783D481)
I: Retrieving Packages
I: Validating Packages
I: Resolving dependencies of required packages...
I: Resolving dependencies of base packages...
I: Checking component main on http://deb.debian.org/debian...
I: Retrieving libacl1 2.3.1-3
I: Validating libacl1 2.3.1-3
I: Retrieving python3.11 3.11.2-6
I: Validating python3.11 3.11.2-6
I: Chosen extractor for .deb packages: dpkg-deb
I: Extracting libacl1...
I: Extracting libc6...
I: Installing core packages...
I: Unpacking required packages...
I: Unpacking libacl1:amd64...
I: Configuring required packages...
I: Configuring libc6:amd64...
I: Unpacking the base system...
I: Unpacking python3.11:amd64...
I: Configuring the base system...
I: Configuring python3-pip...
I: Base system installed successfully.
"""


def test_phases_in_order_with_time_and_estimate_when_piped():
    out = io.StringIO()  # not a terminal: one line per phase
    shares = []
    with BuildProgress("revtree-base:test-v9", stream=out) as progress:
        for line in TRANSCRIPT.splitlines():
            progress.line(line)
            shares.append(progress.fraction())
        for done in (0, 50, 100):
            progress.importing(done, 100)
            shares.append(progress.fraction())
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("building revtree-base:test-v9 from Debian packages")
    assert "about 2 min 30 s, once" in lines[0]
    phases = [phase for _, phase, _ in STAGES] + ["docker import"]
    seen = [next(p for p in phases if f"] {p} (" in line) for line in lines[1:-1]]
    assert seen == phases  # each stage once, in debootstrap's order
    assert all(re.match(r"\[ *\d+ s\] .* \(\d+%, about .* left\)$", ln) for ln in lines[1:-1])
    assert lines[-1].startswith("built revtree-base:test-v9 in ")
    assert shares == sorted(shares) and shares[-1] > 0.99


def test_a_closed_stream_does_not_stop_the_build():
    out = io.StringIO()
    out.close()
    with BuildProgress("t:1", stream=out) as progress:
        for line in TRANSCRIPT.splitlines():
            progress.line(line)
        progress.importing(10, 10)


def test_debootstrap_output_streams_to_progress_and_a_failure_names_its_last_lines():
    out = io.StringIO()
    script = "echo 'I: Retrieving InRelease'; echo 'I: Checking component main on x'; "
    script += "echo 'E: Couldn'\"'\"'t download packages: libc6' >&2; exit 1"
    with pytest.raises(SandboxError) as caught, BuildProgress("t:1", stream=out) as progress:
        _debootstrap("building t:1: debootstrap bookworm", ["sh", "-c", script], progress)
    assert "debootstrap bookworm failed (exit 1)" in str(caught.value)
    assert "E: Couldn't download packages: libc6" in str(caught.value)
    assert "] downloading packages (" in out.getvalue()


@pytest.mark.docker
def test_bootstrap_base_with_the_image_there_prints_its_tag_alone_piped(docker_client):
    """Cached by its tag: a word on stderr, the tag on stdout, fine into `| head -1`."""
    out = subprocess.run(
        f"{sys.executable} -m revtree sandbox bootstrap-base | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{base_tag()}\n"
    assert f"{base_tag()} exists (--force rebuilds it)" in out.stderr
