"""``revtree sandbox ...``: make evaluation images and clean up containers.

A sub-app of its own (``sandbox_app``), wired into the main command at the end of this
module; ``python -m revtree sandbox ...`` runs it without the console script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from revtree.cli.app import app, console
from revtree.errors import RevtreeError

sandbox_app = typer.Typer(
    name="sandbox", help="Docker sandbox images and cleanup.", no_args_is_help=True
)


def _fail(e: RevtreeError) -> None:
    typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
    raise typer.Exit(1) from e


@sandbox_app.command("bootstrap-base")
def bootstrap_base(
    suite: Annotated[str | None, typer.Option(help="Debian suite; default: the host's.")] = None,
    mirror: Annotated[str | None, typer.Option(help="Debian mirror; default: apt's.")] = None,
    tag: Annotated[
        str | None, typer.Option(help="Image tag; default revtree-base:<suite>-vN.")
    ] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even if the tag exists.")] = False,
) -> None:
    """Build the base image from Debian packages (debootstrap + docker import), no registry.

    Progress goes to stderr (a bar on a terminal, one line per phase when piped); the
    tag, and only the tag, to stdout."""
    from revtree.sandboxes import docker as sd
    from revtree.sandboxes import images
    from revtree.sandboxes.progress import BuildProgress

    try:
        client = sd.connect()
        suite = suite or images.host_suite()
        tag = tag or images.base_tag(suite)
        if not force and images.image_exists(client, tag):
            typer.echo(f"{tag} exists (--force rebuilds it)", err=True)
        else:
            with BuildProgress(tag) as progress:
                images.bootstrap_base(client, tag, suite, mirror, force=force, progress=progress)
    except RevtreeError as e:
        _fail(e)
    console.print(tag, markup=False, soft_wrap=True)  # pipe-safe: `| head -0` is fine


@sandbox_app.command("build-image")
def build_image(
    task: Annotated[
        Path | None, typer.Argument(help="Task folder (its name tags the image).")
    ] = None,
    dockerfile: Annotated[Path | None, typer.Option(help="Dockerfile (ARG BASE is set).")] = None,
    requirement: Annotated[
        list[str] | None, typer.Option("--requirement", "-r", help="pip requirement; repeat.")
    ] = None,
    requirements_file: Annotated[
        Path | None, typer.Option(help="requirements.txt to install.")
    ] = None,
    base: Annotated[
        str | None, typer.Option(help="Base image; default: bootstrapped or python:3.11-slim.")
    ] = None,
    tag: Annotated[str | None, typer.Option(help="Image tag to build.")] = None,
    context: Annotated[
        Path | None,
        typer.Option(help="Build context: files a requirement may name (./x.whl)."),
    ] = None,
) -> None:
    """Build a task's evaluation image from a Dockerfile or a requirements list."""
    from revtree.sandboxes import docker as sd
    from revtree.sandboxes import images

    reqs = list(requirement or [])
    if requirements_file is not None:
        reqs += [ln.strip() for ln in requirements_file.read_text().splitlines() if ln.strip()]
    if tag is None and task is not None:
        tag = f"revtree-task-{task.resolve().name.lower()}:latest"
    try:
        client = sd.connect()
        built = images.build_image(client, tag, base, dockerfile, reqs, context)
    except RevtreeError as e:
        _fail(e)
    typer.echo(built)
    typer.echo(f'set it in task.toml:  [sandbox] image = "{built}"')


@sandbox_app.command("gc")
def gc(
    everything: Annotated[
        bool, typer.Option("--all", help="Also containers of live runs.")
    ] = False,
) -> None:
    """Remove revtree containers and volumes left by dead (killed) orchestrators."""
    from revtree.sandboxes import docker as sd

    try:
        n = sd.reap(sd.connect(), everything=everything)
    except RevtreeError as e:
        _fail(e)
    typer.echo(f"removed {n} container(s)")


app.add_typer(sandbox_app, name="sandbox")
