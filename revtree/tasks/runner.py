"""The ``[runner]`` section: where a run's evaluations execute.

``kind = "local"`` (the default) runs them on this machine, in its sandbox backend.
``kind = "ray"`` submits each one to a Ray cluster at ``address`` as a Ray task asking
for ``cpus``, ``gpus``, ``memory`` and the custom ``resources``; on the worker Ray picks,
the evaluation runs in that machine's own sandbox backend (see
:mod:`revtree.sandboxes.ray`). The orchestrator stays on this machine and is the only
writer to the database.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from revtree.tasks.sections import Duration, Section, Size

ADDRESS = re.compile(r"^(auto|(ray://)?[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5})$")


class RunnerConfig(Section):
    """Where evaluations run: on this machine, or on a Ray cluster."""

    kind: Literal["local", "ray"] = Field(
        "local", description="'local': this machine; 'ray': a Ray cluster at `address`."
    )
    address: str = Field(
        "auto",
        description="Ray: the cluster, 'auto' (RAY_ADDRESS, else the cluster `ray start` "
        "started here), 'ray://HOST:10001' (Ray Client) or HOST:PORT (the head's GCS).",
    )
    cpus: float = Field(1.0, ge=0, description="Ray: CPUs each evaluation asks for.")
    gpus: int | None = Field(
        None,
        ge=0,
        description="Ray: GPUs each evaluation asks for, exclusive (default: sandbox.gpus).",
    )
    memory: Size | None = Field(None, description="Ray: memory each evaluation reserves.")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Ray: custom resources each evaluation asks for, e.g. an accelerator type.",
    )
    retries: int = Field(
        3,
        ge=0,
        le=20,
        description="Ray: times an evaluation whose worker or node died is re-submitted.",
    )
    connect_timeout: Duration = Field(
        10.0, description="Ray: how long the cluster's address may take to answer."
    )

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        value = value.strip()
        if not ADDRESS.match(value):
            raise ValueError(
                f"expected 'auto', 'ray://HOST:PORT' or HOST:PORT as the Ray address, got {value!r}"
            )
        return value

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [k for k, v in value.items() if v < 0 or k in ("CPU", "GPU", "memory")]
        if bad:
            raise ValueError(
                f"custom resources need a non-negative amount and a name other than CPU, "
                f"GPU or memory (use cpus, gpus, memory): {bad}"
            )
        return value
