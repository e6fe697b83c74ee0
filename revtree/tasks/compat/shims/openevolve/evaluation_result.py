"""``openevolve.evaluation_result`` as OpenEvolve defines it: metrics plus artifacts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EVALUATION_FAILED_METRIC = "__evaluation_failed__"


@dataclass
class EvaluationResult:
    """What an evaluator returns: ``metrics`` (scores and other values) and ``artifacts``
    (text or bytes fed back to the agents, such as stderr or a failing test case)."""

    metrics: dict[str, Any]
    artifacts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, metrics: dict[str, Any]) -> EvaluationResult:
        return cls(metrics=metrics)

    def to_dict(self) -> dict[str, Any]:
        return self.metrics

    def has_artifacts(self) -> bool:
        return bool(self.artifacts)

    def get_artifact_keys(self) -> list[str]:
        return list(self.artifacts)

    def get_artifact_size(self, key: str) -> int:
        value = self.artifacts.get(key)
        if value is None:
            return 0
        return len(value) if isinstance(value, bytes) else len(str(value).encode("utf-8"))

    def get_total_artifact_size(self) -> int:
        return sum(self.get_artifact_size(key) for key in self.artifacts)
