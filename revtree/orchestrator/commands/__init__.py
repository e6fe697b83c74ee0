"""What the CLI does to a run besides driving it: retry a node, fork a run, export a
node, check the memory (doctor), report and compare, and the policy pilot. Each takes
the Store (and the run's home) and uses the orchestrator's public API only. Before a
run: the preflight (``check``) and its model call (``models``), which also gates
``run`` and ``resume``.

Checkpoint gc lives with the checkpoints (``revtree.memory.checkpoints.gc``): it is
LangGraph SQL and nothing else.
"""
