"""Which model of a role's ensemble makes each candidate: by weight, or by a bandit.

With ``[agents] model_selection = "bandit"``, the proposer and the coder, where their
role has an ``ensemble``, get a Thompson-sampling bandit (``agents.llm.bandit``) each:
the first call of a candidate (node and attempt) asks it for a model, and every call of
that candidate (repairs, tool steps) goes to the same model. Each choice is a ``model``
event (the live log: the model, and every arm's candidates and mean reward). When the
candidate finishes, its model is rewarded (``reward``): 0 for a candidate that failed,
was rejected, refused as a near twin or is no better than its parent; else 0.5 plus
half its relative gain (gain / |parent's score|, capped at 1; 1 for a fix of a failed
parent), less ``bandit_cost_penalty`` per dollar its calls to that model cost.

A resumed run (and ``revtree show``) rebuilds the bandits from SQL: the ``model`` events
say which model made which candidate, the nodes say how each came out (``replay``).
Reviewer and analyst ensembles, and ``model_selection = "weights"``, pick by weight on
every call (``agents.llm.Ensemble``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from revtree.agents.llm import LLM, Ensemble
from revtree.agents.llm.bandit import Thompson, reward
from revtree.memory.records import Event, Node
from revtree.tasks.agent_settings import AgentsSection

if TYPE_CHECKING:
    from revtree.memory import Store

EVENT = "model"
BANDIT_ROLES = ("proposer", "coder")  # the roles whose model makes the candidate
Key = tuple[str, int, int]  # role, node, attempt


@dataclass(frozen=True)
class Setting:
    """What the bandits of a run are made of: per role its models (the arms; empty where
    no bandit drives the run), the seed, the metric's direction, the cost penalty."""

    arms: dict[str, list[str]]
    seed: int
    maximize: bool
    penalty: float

    @classmethod
    def of(cls, agents: AgentsSection, seed: int, maximize: bool) -> Setting:
        arms = {}
        if agents.model_selection == "bandit":
            roles = ("coder",) if agents.one_call else BANDIT_ROLES
            arms = {
                r: [m.model for m in getattr(agents, r).ensemble]
                for r in roles
                if getattr(agents, r).ensemble
            }
        return cls(arms, seed, maximize, agents.bandit_cost_penalty)


def choices_of(events: Iterable[Event]) -> dict[Key, str]:
    """The model each candidate was given, from the ``model`` events (the last wins)."""
    out: dict[Key, str] = {}
    for e in events:
        if e.kind == EVENT and e.node_id is not None and e.data and "chose" in e.data:
            out[e.data["role"], e.node_id, int(e.data.get("attempt", 1))] = e.data["chose"]
    return out


def replay(
    setting: Setting,
    chosen: Mapping[Key, str],
    nodes: Mapping[int, Node],
    usd: Mapping[tuple[int, str], float] | None = None,
) -> dict[str, Thompson]:
    """The bandits as the run left them: every choice counted, every finished candidate's
    reward credited to its model. ``usd``: (node, role) -> dollars, for the penalty."""
    bandits = {role: Thompson(arms, setting.seed, role) for role, arms in setting.arms.items()}
    for (role, node_id, attempt), model in chosen.items():
        if role not in bandits:
            continue
        bandits[role].seek(bandits[role].choices + 1)
        node = nodes.get(node_id)
        if node is not None and node.attempt == attempt and node.status.is_finished():
            cost = (usd or {}).get((node_id, role), 0.0)
            bandits[role].reward(model, _reward_of(setting, node, nodes, cost))
    return bandits


def _reward_of(setting: Setting, node: Node, nodes: Mapping[int, Node], usd: float) -> float:
    parent = nodes.get(node.parent_id if node.parent_id is not None else -1)
    if parent is None:
        return 0.0
    return reward(node, parent, setting.maximize, usd, setting.penalty)


def summary(setting: Setting, events: Iterable[Event], nodes: Iterable[Node]) -> dict[str, Any]:
    """What ``revtree show`` says of the bandits: per role, each model's candidates and
    mean reward (empty when no bandit drives the run)."""
    if not setting.arms:
        return {}
    bandits = replay(setting, choices_of(events), {n.id: n for n in nodes})
    return {role: {"selection": "bandit", "models": b.stats()} for role, b in bandits.items()}


class ModelChoice:
    """The run's bandits, live: the model of each candidate's calls, and its reward."""

    def __init__(
        self,
        store: Store,
        setting: Setting,
        run_id: str,
        nodes: Mapping[int, Node],
        models: Mapping[str, LLM],
        usd: Mapping[tuple[int, str], float],
    ) -> None:
        """``usd``: (node, role) -> dollars spent by this process (the meter's ``by_node``),
        read for the cost penalty."""
        self.store, self.setting, self.run_id = store, setting, run_id
        self.members: dict[str, dict[str, LLM]] = {}
        for role, arms in setting.arms.items():
            ensemble = models.get(role)
            if isinstance(ensemble, Ensemble):
                self.members[role] = dict(zip(arms, ensemble.members, strict=True))
        self.chosen = choices_of(self._events()) if self.members else {}
        self.bandits = replay(setting, self.chosen, nodes, self._spent()) if self.members else {}
        self.usd = usd
        self._lock = threading.Lock()

    def _events(self) -> list[Event]:
        out, after = [], 0
        while batch := self.store.events_since(self.run_id, after):
            after = batch[-1].seq
            out += [e for e in batch if e.kind == EVENT]
        return out

    def _spent(self) -> dict[tuple[int, str], float]:
        if not self.setting.penalty:
            return {}
        out: dict[tuple[int, str], float] = {}
        for c in self.store.llm_calls(self.run_id):
            if c.node_id is not None:
                out[c.node_id, c.role] = out.get((c.node_id, c.role), 0.0) + c.cost_usd
        return out

    def llm(self, role: str, node: Node, default: LLM) -> LLM:
        """The model for this call of ``role`` on ``node``: the bandit's choice for the
        candidate (made at its first call, said in the live log), else ``default``."""
        members = self.members.get(role)
        if members is None:
            return default
        key = (role, node.id, node.attempt)
        with self._lock:
            model = self.chosen.get(key)
            if model is None or model not in members:
                model = self.chosen[key] = self.bandits[role].choose()
                self._said(role, node, model)
        return members[model]

    def _said(self, role: str, node: Node, model: str) -> None:
        bandit = self.bandits[role]
        arm = bandit.arms[model]
        mean = "-" if arm.mean is None else f"{arm.mean:.2f}"
        self.store.add_event(
            self.run_id,
            EVENT,
            f"node {node.id}: {role} on {model} (bandit: {arm.pulls} "
            f"candidate{'' if arm.pulls == 1 else 's'}, mean "
            f"reward {mean}; all: {bandit.line()})",
            node.id,
            {"role": role, "chose": model, "attempt": node.attempt, "models": bandit.stats()},
        )

    def observe(self, node: Node, parent: Node) -> None:
        """Reward the model(s) that made a finished candidate (a resumed candidate made
        before the resume: its spend before it is not in the penalty)."""
        for role, bandit in self.bandits.items():
            with self._lock:
                model = self.chosen.get((role, node.id, node.attempt))
                if model is None:
                    continue
                usd = self.usd.get((node.id, role), 0.0)
                value = reward(node, parent, self.setting.maximize, usd, self.setting.penalty)
                bandit.reward(model, value)


__all__ = ["EVENT", "ModelChoice", "Setting", "Thompson", "replay", "reward", "summary"]
