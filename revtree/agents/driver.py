"""Who writes a run's candidates, decided in one place from the task (issue 25).

Four drivers: the offline Optuna knob proposer (``knobs``, or ``knobs-local`` with the
local sampler), offline code mutations (``mutate``), and LLM agents (``llm``) in one call
per candidate (the coder gives the hypothesis and the edits) or two (the proposer's
hypothesis, then the coder's edits). ``[agents] mode`` names one, or ``auto`` picks: the
LLM agents where a model is named and can be called (a key or a base URL) or a provider
key is set; else the knob proposer where the task declares ``[[knobs]]``, else code
mutations. The wiring builds the agents the driver names, ``pilot`` reads which policies
can differ by it, ``check`` asks its models, the sandbox choice asks who writes the code,
and the run's start says which it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from revtree.agents.llm import detect_model, missing_key

if TYPE_CHECKING:
    from revtree.tasks.spec import TaskSpec

Name = Literal["knobs", "knobs-local", "mutate", "llm"]
KNOBS: Name = "knobs"
KNOBS_LOCAL: Name = "knobs-local"
MUTATE: Name = "mutate"
LLM: Name = "llm"
DRIVERS: tuple[Name, ...] = (KNOBS, KNOBS_LOCAL, MUTATE, LLM)


@dataclass(frozen=True)
class Driver:
    """The decision. ``calls``: "one" or "two" model calls per candidate (LLM only);
    ``offline_reason``: in ``auto``, why a model the task names cannot be called, so the
    offline agents drive instead (said at the run's start)."""

    name: Name
    calls: Literal["one", "two"] | None = None
    offline_reason: str | None = None

    @property
    def llm(self) -> bool:
        return self.name == LLM

    @property
    def knobs(self) -> bool:
        return self.name in (KNOBS, KNOBS_LOCAL)

    @property
    def label(self) -> str:
        """The driver in the words of the run's first line."""
        if self.llm:
            return "LLM"
        return "offline Optuna knobs" if self.knobs else "offline code mutations"

    def writers(self) -> dict[str, object]:
        """Who writes the candidates, as the sandbox choice asks: ``knob_only`` where the
        offline knob proposer only sets the task's knobs in the user's own code (it may
        run locally where Docker cannot take it), else ``writer`` (LLM agents, or random
        code mutations: never run outside Docker unless the task or ``--sandbox`` says)."""
        if self.knobs:
            return {"knob_only": True}
        if self.llm:
            return {"writer": "LLM agents write this run's candidates"}
        return {
            "writer": "random code mutations (the offline agents without [[knobs]]) write "
            "this run's candidates"
        }


def driver(spec: TaskSpec) -> Driver:
    """The driver of a run of ``spec`` (see the module's docstring)."""
    a = spec.agents
    why = offline_reason(spec)
    if a.mode == "llm" or (a.mode == "auto" and why is None and _names_a_model(spec)):
        return Driver(LLM, calls="one" if a.one_call else "two")
    if a.mode == "mutate" or (a.mode == "auto" and not spec.knobs):
        return Driver(MUTATE, offline_reason=why)
    return Driver(KNOBS_LOCAL if a.knobs.sampler == "local" else KNOBS, offline_reason=why)


def _names_a_model(spec: TaskSpec) -> bool:
    a = spec.agents
    roles = (a.proposer, a.coder)
    return bool(a.model or any(r.model or r.ensemble for r in roles) or detect_model())


def offline_reason(spec: TaskSpec) -> str | None:
    """In ``auto`` mode, why a model the task names cannot be used (no key, no base
    URL), so the offline agents drive the run instead."""
    a = spec.agents
    if a.mode != "auto":
        return None
    roles = (a.proposer, a.coder)
    named = [a.model] if a.model else []
    named += [r.model for r in roles if r.model] + [m.model for r in roles for m in r.ensemble]
    for model in named:
        if (why := missing_key(model, a.base_url, a.api_key_env)) is not None:
            return why
    return None
