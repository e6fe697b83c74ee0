"""The Docker sandbox: every execution in a fresh, hardened container.

How an execution runs. A container gets a fresh workspace volume holding ``work/`` and
``out/``; the warm pool (``warm_pool``, 2 by default) holds containers created and
started ahead of use, refilled while the next command runs; the container and its volume
are removed after the execution by a background thread, so results never wait for
removal. Two ways to run the command, by where the volume lives:

- *resident runner* (the engine keeps the volume on this host and this process may use
  its folder: root). The container's only process, as the sandbox user, blocks opening
  a FIFO in the volume's root (``.go``). To run, the host writes the workspace archive
  and the runner script into that root (root's: the sandbox user cannot change them)
  and opens the FIFO: the waiting process becomes the runner script, which unpacks the
  archive as the sandbox user and runs the command. Its stdout and stderr arrive on an
  attach stream opened before the container started; the exit code is the container's
  (it exits with its runner), from the engine. No exec: about half the latency.
- *exec* (a remote engine, or a folder this process cannot use): the container idles
  in ``sleep``; the runner script runs through the exec API as the sandbox user and
  unpacks the workspace from its stdin; ``out/`` and ``work/`` are made, and outputs
  read, with ``put_archive`` / ``get_archive``.

In both, the runner script opens ``out/metrics.json`` as the command's file descriptor 3
(``METRICS_FD``; no path in its environment) and the host reads it back afterwards;
declared outputs (``ExecRequest.outputs``, globs, plus the task's ``[sandbox] outputs``
names) are found by walking ``work/`` in the volume's folder when it is on this host
(``lstat``, never following a link), else by streaming ``get_archive`` of ``work/`` and
filtering its members.

What is covered:
- a new container per execution, never reused (a warm-pool container has run nothing
  but its idle process: ``sleep``, or the resident runner blocked on its FIFO, which
  only the host can open for writing); it sees only the request's archive (the
  candidate's ``git archive`` plus fresh protected files, filtered on the host: nothing
  escapes the workspace), unpacked by the sandbox user inside the container, never by
  the host, into a fresh volume (capped: ``RLIMIT_FSIZE`` per file, and a host-side
  watch of the volume's total size that kills the container past ``disk`` when the
  engine is on this host). The run's repository, its database, the host's
  home and other candidates' workspaces are not mounted; task ``mounts`` are read-only;
- no network unless the task opts in; a read-only root file system with a size-capped
  tmpfs ``/tmp``; all capabilities dropped, ``no-new-privileges``, a non-root user
  (the command inherits all of these from the container); limits on processes (the
  idle process or the resident runner counts as one), memory (swap included, for the
  whole container), CPUs, CPU time and address space;
- the timeout and the cancel event enforced from the host by killing the whole
  container, with a backstop inside it (``timeout -s KILL``) should the orchestrator
  die; when the command ends, every other process of the sandbox user in the container
  is killed (``kill -KILL -1``), so nothing it started outlives it (a resident
  runner then exits, and its container with it), and nothing changes the volume while
  the host reads the metrics and outputs out of it;
- a timeout is reported as ``timed_out``; an out-of-memory kill (the engine's ``oom``
  event for the container) and the disk cap are named in ``stderr``;
- the container and its volume removed after every execution, whatever happened
  (``close()`` waits for the removals in flight); they carry the label
  ``revtree.sandbox`` and their owner (host, pid, process start time), so ``reap()``
  (and ``revtree sandbox gc``) remove those of dead orchestrators, warm ones included;
- the metrics channel is file descriptor 3 of the command only: no variable names it,
  and Python's ``subprocess`` closes it in the children (``close_fds``); a metrics file
  the command replaced by anything but a regular file within ``METRICS_CAP`` is not
  read (``metrics_text`` is None, the reason in ``stderr``);
- declared outputs copied out: regular files only, each under ``OUTPUT_FILE_CAP`` (or
  ``output_cap``), all under ``OUTPUTS_CAP``; a link, FIFO, socket, device, hard link
  (through the API), a pattern out of the workspace (absolute, ``..``) or a file over a
  cap is named in ``refused`` with the reason, never copied and never an error;
- engine and image failures raised as :class:`~revtree.errors.SandboxError` naming
  the engine, the image or the step, and how to make a missing image.

What is not covered: the container shares the host's kernel (a kernel exploit escapes
it); GPUs handed to an evaluation are visible in full to it; with ``network`` set to
``bridge`` or ``host`` the code can reach whatever that network reaches. The metrics
channel keeps a score from a *child* of the evaluator only: every process of the
sandbox user can still write ``/sandbox/out/metrics.json`` by its path, or the
evaluator's descriptor through ``/proc/<pid>/fd/3``, and a shell passes the descriptor
on; so a task whose evaluator runs candidate code in-process or through a shell can
have its score forged, and only a separate grade step (a fresh sandbox over the
declared outputs) prevents that. If the orchestrator is killed, the backstop ends the
candidate's processes, but the container (stopped, or idle in the exec design) and its
volume stay until ``reap()`` or ``revtree sandbox gc``; so do idle warm-pool containers.

The package, cut by what each part talks to (a module uses only another's public names):

- ``engine``: the engine as a whole: connecting, the owner labels, the reaper, the
  missing-image message; and the names all the others share (the sandbox user, paths).
- ``containers``: one box's life on the engine (create hardened, start, skeleton, kill,
  exit code, OOM event, remove). Split from ``engine`` because it is most of the
  engine calls and both the pool and the launches need it, while the engine-wide part
  (``connect``, ``reap``) is what the CLI and ``choose_backend`` import.
- ``pool``: the warm pool and the remover thread, and the phases they wait on.
- ``launch``: the two launch modes, the runner script, and the output stream's reader
  (``Tails``: a launch returns it, and it writes an exec's stdin, so it lives here
  rather than with the file reads).
- ``files``: archives in, files out: safe tar reads, one file read without following
  links, declared-output collection, the volume's disk usage.
- ``sandbox``: :class:`DockerSandbox`, which ties them together for one execution.
"""

from revtree.sandboxes.docker.engine import (
    LABEL,
    NODE,
    OWNER,
    RUN,
    WARM,
    connect,
    engine_answers,
    engine_url,
    missing_image,
    owner_alive,
    owner_id,
    reap,
    start_time,
)
from revtree.sandboxes.docker.files import glob_match
from revtree.sandboxes.docker.launch import runner_script
from revtree.sandboxes.docker.sandbox import Config, DockerResult, DockerSandbox, GpuLease, build

__all__ = [
    "LABEL",
    "NODE",
    "OWNER",
    "RUN",
    "WARM",
    "Config",
    "DockerResult",
    "DockerSandbox",
    "GpuLease",
    "build",
    "connect",
    "engine_answers",
    "engine_url",
    "glob_match",
    "missing_image",
    "owner_alive",
    "owner_id",
    "reap",
    "runner_script",
    "start_time",
]
