"""The Ray runner: each evaluation is a Ray task on a cluster, placed by its resources.

The driver (:class:`RaySandbox`, in the orchestrator's process) puts each distinct
workspace archive into Ray's object store once (cached by its hash), submits one Ray
task per request asking for the task's ``[runner]`` resources (``cpus``, ``gpus``,
``memory``, custom ``resources``), and waits for it while watching the cancel event: a
stopped run cancels its Ray tasks by raising each one's flag in the cluster's key-value
store, which the worker watches and on which it stops the evaluation through its own
backend (or never starts it); a task still running after a grace period is cancelled
with Ray's force (its worker killed). ``capacity`` says how many evaluations of the
task's request the cluster's nodes hold at once (``--parallel auto`` follows it).

The worker (:mod:`revtree.sandboxes.ray.worker`) runs the request in that machine's own
sandbox backend, as ``choose_backend`` picks it there (Docker with the task's image
where it has an engine, else local, never a silent downgrade), handing it exactly the
GPU ids Ray assigned. The result comes back with the declared output files, the worker's
host (host name and Ray node id) and the GPU ids. Worker machines need
``pip install 'revtree[ray]'`` and no checkout: the code travels in the archive.

Faults: a task lost with its worker or node (Ray's system errors, never the candidate's
own failure, which is a normal result) is re-submitted up to ``retries`` times, each one
told to the event sink (the run's live log); only the one result that comes back is
returned, so the evaluation is recorded once. A cluster that does not answer fails at
once, naming the address. Only this process writes to the database: the workers return
results and never see it.
"""

from revtree.sandboxes.ray.sandbox import RaySandbox, bootstrap_address, build, connect

__all__ = ["RaySandbox", "bootstrap_address", "build", "connect"]
