"""The cost model (RubberBand §4.1): device-hours held or used, billing weights, a price.

* **held** (the paper's per-instance billing; Slurm's): a worker costs its devices from the
  start of its allocation to its end, idle time included (start-up, waiting at a rung).
* **used** (the paper's per-function billing): only the devices' time in segments.

Device-hours become *billed* hours through the partition's ``TRESBillingWeights``: one device
with the CPUs and memory that come with it bills ``billing_weight`` units per hour
(:func:`device_billing`); a ``price`` per billed unit-hour turns them into money.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpctune.elastic.experiment import PlanningError

BASES = ("held", "used")


@dataclass(frozen=True)
class CostModel:
    """How device-seconds become a cost.

    Attributes:
        basis: ``"held"`` (allocation start to end) or ``"used"`` (time in segments).
        billing_weight: Billed units per device-hour (1: plain device-hours).
        price: Money per billed unit-hour (with weight 1: per device-hour); ``None``: no money.
        device: What a device is (``"GPU"``; ``"CPU"`` where CPUs stand in for GPUs).
        billing_source: Where the weight comes from, for printing.
    """

    basis: str = "held"
    billing_weight: float = 1.0
    price: float | None = None
    device: str = "GPU"
    billing_source: str = ""

    def __post_init__(self) -> None:
        if self.basis not in BASES:
            raise PlanningError(f"cost basis must be 'held' or 'used', not {self.basis!r}")
        if not self.billing_weight > 0:
            raise PlanningError(f"billing weight must be > 0, but got {self.billing_weight}")
        if self.price is not None and not self.price > 0:
            raise PlanningError(f"--price must be > 0, but got {self.price}")

    @property
    def unit(self) -> str:
        """The unit costs are given in: ``$``, ``billed hours`` or ``GPU-hours``."""
        if self.price is not None:
            return "$"
        return "billed hours" if self.billing_weight != 1.0 else f"{self.device}-hours"

    def of(self, device_seconds: Any) -> Any:
        """The cost of ``device_seconds`` (a number or an array) in :attr:`unit`."""
        return device_seconds / 3600.0 * self.billing_weight * (self.price or 1.0)

    def format(self, value: float) -> str:
        """``$15.68`` or ``5.12 GPU-hours``."""
        if self.price is not None:
            return f"${value:,.2f}"
        return f"{value:,.3g} {self.unit}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "basis": self.basis,
            "billing_weight": self.billing_weight,
            "price": self.price,
            "device": self.device,
            "billing_source": self.billing_source,
            "unit": self.unit,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostModel:
        """Rebuild from :meth:`to_dict`."""
        price = data.get("price")
        return cls(
            basis=str(data.get("basis", "held")),
            billing_weight=float(data.get("billing_weight", 1.0)),
            price=None if price is None else float(price),
            device=str(data.get("device", "GPU")),
            billing_source=str(data.get("billing_source", "")),
        )


_UNITS = {"K": 1 / 1024 / 1024, "M": 1 / 1024, "G": 1.0, "T": 1024.0, "P": 1024.0**2}


def parse_tres_weights(text: str) -> dict[str, float]:
    """Parse Slurm's ``TRESBillingWeights`` (``CPU=1.0,Mem=0.25G,GRES/gpu=2.0``).

    Keys are lower-cased (``cpu``, ``mem``, ``gres/gpu``, ``gres/gpu:a100``); a memory weight is
    per GB (Slurm's default unit for it is MB unless a suffix says otherwise).

    Raises:
        PlanningError: An entry is not ``NAME=number`` with an optional K/M/G/T/P suffix.
    """
    weights: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"([A-Za-z][\w/:.-]*)=(-?[0-9.]+(?:[eE][-+]?\d+)?)([KMGTP]?)", item)
        if match is None:
            raise PlanningError(
                f"billing weights: {item!r} is not NAME=number (e.g. CPU=1.0,Mem=0.25G,"
                "GRES/gpu=2.0)"
            )
        name, number, suffix = match.group(1).lower(), float(match.group(2)), match.group(3)
        if name == "mem":  # a weight per MB unless suffixed: make it per GB
            number = number / (_UNITS[suffix] if suffix else 1 / 1024)
        weights[name] = number
    return weights


def device_billing(
    weights: Mapping[str, float],
    *,
    cpus_per_device: float,
    mem_gb_per_device: float = 0.0,
    gpu: bool = True,
) -> float:
    """Billed units per device-hour: the weights of one device (``gres/gpu`` for a GPU, or the
    CPU it is) plus those of the CPUs and memory each device comes with (Slurm's sum of
    weighted TRES; without weights Slurm bills the CPUs)."""
    if not weights:
        return float(cpus_per_device if gpu else 1.0)
    gpu_weight = max(
        (w for k, w in weights.items() if k == "gres/gpu" or k.startswith("gres/gpu:")),
        default=0.0,
    )
    total = weights.get("cpu", 0.0) * cpus_per_device + weights.get("mem", 0.0) * mem_gb_per_device
    return total + (gpu_weight if gpu else 0.0)


__all__ = ["BASES", "CostModel", "device_billing", "parse_tres_weights"]
