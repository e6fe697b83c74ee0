"""What the model roles of a run share: their clients, metered, chosen, structured.

``Models`` is built once per run by ``wiring`` and handed to each role of
``llm_agents``: each enabled role's client (an ``Ensemble`` for a role with one), the
``Meter`` (budgets, transcripts), the ``ModelChoice`` (which model of an ensemble makes a
candidate: by weight, or by a bandit rewarded when the candidate finishes: ``rewards``),
and each role's ``Structured`` switch.

Structured answers (``agents.structured``, per role): the roles on one model share one
switch; a server's refusal turns it off for the rest of the run and is recorded once,
as a warning event.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from revtree.agents.knob_text import derive_seed
from revtree.agents.llm import LLM, Ensemble, LLMError, detect_model, make_llm, split_model
from revtree.agents.llm.meter import Meter
from revtree.agents.structured import Structured, structured_kind
from revtree.memory.records import Node
from revtree.orchestrator.model_choice import ModelChoice, Setting
from revtree.tasks.spec import Role, TaskSpec

if TYPE_CHECKING:
    from revtree.memory import Store
    from revtree.orchestrator.mirror import Mirror

ROLES = ("proposer", "coder", "reviewer", "analyst")
R = TypeVar("R")
Say = Callable[[str, str, "int | None", "dict[str, Any] | None"], object]  # kind, message, …


def enabled_roles(spec: TaskSpec) -> list[str]:
    """The roles a run calls a model for: each enabled one (not the proposer in one-call
    mode, where the coder proposes)."""
    a = spec.agents
    roles = ROLES[1:] if a.one_call else ROLES
    return [name for name in roles if getattr(a, name).enabled]


def model_name(spec: TaskSpec, role: Role) -> str | None:
    """The model a role without an ensemble calls: its own, the run's, or the one the
    environment's key suggests."""
    return role.model or spec.agents.model or detect_model()


def role_models(spec: TaskSpec) -> dict[str, LLM]:
    """The model client of each enabled role (``enabled_roles``), as a run builds them:
    raises ``LLMError`` for a model that cannot be called (no key, no base URL, an
    unknown provider), before any call is made."""
    return {
        name: role_model(spec, name, getattr(spec.agents, name)) for name in enabled_roles(spec)
    }


def role_model(spec: TaskSpec, name: str, role: Role) -> LLM:
    a = spec.agents
    kw: dict[str, Any] = {
        "base_url": a.base_url,
        "api_key_env": a.api_key_env,
        "timeout": a.timeout,
        "max_retries": a.max_retries,
        "stream": a.stream,
    }
    if role.ensemble:
        members = [make_llm(m.model, **kw) for m in role.ensemble]
        seed = derive_seed(spec.search.seed, "ensemble", name)
        return Ensemble(members, [m.weight for m in role.ensemble], seed)
    model = model_name(spec, role)
    if model is None:
        raise LLMError(
            f"no model for the {name}: set agents.model, agents.{name}.model, "
            "--model, or OPENAI_API_KEY / ANTHROPIC_API_KEY"
        )
    return make_llm(model, **kw)


def models_of(spec: TaskSpec, role: Role) -> list[str]:
    """The model names of a role: its ensemble's, else its own (or the run's)."""
    if role.ensemble:
        return [m.model for m in role.ensemble]
    model = role.model or spec.agents.model or detect_model()
    return [model] if model else []


@dataclass(frozen=True)
class Models:
    """The run's model clients as the roles call them (see the module's docstring).
    ``say(kind, message, node, data)`` writes an event to the run's live log."""

    spec: TaskSpec
    clients: Mapping[str, LLM]
    meter: Meter
    choice: ModelChoice
    structured: Mapping[str, Structured]
    say: Say

    @classmethod
    def build(cls, store: Store, spec: TaskSpec, mirror: Mirror) -> Models:
        run_id = mirror.run_id
        meter = Meter(store, run_id, spec)
        clients = role_models(spec)
        setting = Setting.of(spec.agents, spec.search.seed, spec.maximize)
        choice = ModelChoice(store, setting, run_id, mirror.nodes, clients, meter.by_node)
        say: Say = functools.partial(store.add_event, run_id)
        return cls(spec, clients, meter, choice, _structured(spec, clients, say), say)

    def role(self, cls: Callable[..., R], name: str, node: Node, **kw: Any) -> R:
        """The ``revtree.agents.roles`` object of one call of ``name`` for ``node``: on
        the model chosen for the candidate, metered, with the role's settings."""
        a, role = self.spec.agents, getattr(self.spec.agents, name)
        model = self.choice.llm(name, node, self.clients[name])
        llm = self.meter.bind(name, node.id, model, node.attempt)
        return cls(
            name,
            llm,
            self.spec,
            role.max_tokens or a.max_tokens,
            a.temperature if role.temperature is None else role.temperature,
            role.prompt,
            structured=self.structured[name],
            **kw,
        )

    def refused(self, name: str, why: str) -> None:
        """Say that the server refused the role's structure (tools) where its switch
        cannot say it (it was off already)."""
        refused(self.say, models_of(self.spec, getattr(self.spec.agents, name)), why)


def _structured(spec: TaskSpec, clients: Mapping[str, LLM], say: Say) -> dict[str, Structured]:
    """Each role's structure switch, one per model (roles on a model share it)."""
    a, out, shared = spec.agents, {}, dict[tuple[str, ...], Structured]()
    for name in clients:
        role = getattr(a, name)
        models = models_of(spec, role)
        kind = structured_kind(role.structured or a.structured, [split_model(m)[0] for m in models])
        key = (kind, *models)
        if key not in shared:
            shared[key] = Structured(kind, functools.partial(refused, say, models))
        out[name] = shared[key]
    return out


def refused(say: Say, models: list[str], why: str) -> None:
    say(
        "warning",
        f"{', '.join(models)}: structured answers refused; plain text from now on ({why})",
        None,
        {"models": models, "structured": "off"},
    )


def rewards(choice: ModelChoice, mirror: Mirror) -> Callable[[Node], None]:
    """A mirror observer: the bandits reward the model that made each finished node."""

    def observe(node: Node) -> None:
        if node.parent_id is not None:
            choice.observe(node, mirror.get(node.parent_id))

    return observe
