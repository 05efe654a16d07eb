"""Explicit randomness: every random number in hpctune comes from a seed derived here.

One master seed (``[study].seed``) feeds everything. Components (the generator, the policy, curve
fits) get their own seed from :func:`component_seed`; the ``index``-th draw of a component comes
from :func:`index_rng`, so a restarted controller redraws exactly what the killed one drew.
Nothing here uses Python's ``hash()`` (salted per process) or NumPy's global random state.
"""

from __future__ import annotations

import hashlib

import numpy as np

_MASK_63 = (1 << 63) - 1
_MASK_31 = (1 << 31) - 1


def _check_seed(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, but got {value!r}")


def component_seed(master_seed: int, component: str) -> int:
    """Return the seed of ``component`` (e.g. ``"generator"``) under ``master_seed``.

    Stable across runs, machines and Python versions: a BLAKE2b digest of the seed and the
    component's UTF-8 bytes, as a non-negative 63-bit integer.

    Raises:
        ValueError: ``master_seed`` is not a non-negative integer.
    """
    _check_seed("master_seed", master_seed)
    digest = hashlib.blake2b(
        master_seed.to_bytes((master_seed.bit_length() + 8) // 8, "big")
        + b"\x00"
        + component.encode("utf-8"),
        digest_size=8,
        person=b"hpctune-seed",
    ).digest()
    return int.from_bytes(digest, "big") & _MASK_63


def index_rng(seed: int, index: int) -> np.random.Generator:
    """Return the generator of the ``index``-th draw under ``seed``.

    It is ``np.random.Generator(PCG64(SeedSequence(entropy=seed, spawn_key=(index,))))``: draws
    for different indices are independent and each depends on ``(seed, index)`` only.
    """
    _check_seed("seed", seed)
    _check_seed("index", index)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(index,))))


def trial_seed(master_seed: int, trial_id: int) -> int:
    """Return the seed for the user's code in trial ``trial_id``: an int in ``[0, 2**31)``.

    Suitable for ``torch.manual_seed``, ``np.random.default_rng`` and ``random.seed``.
    """
    _check_seed("trial_id", trial_id)
    seq = np.random.SeedSequence(component_seed(master_seed, "trial"), spawn_key=(trial_id,))
    return int(seq.generate_state(1, np.uint32)[0]) & _MASK_31


def stage_seed(master_seed: int) -> int:
    """Return the seed of every trial of a stage-tree study: an int in ``[0, 2**31)``.

    The same for all trials, so that trials sharing a prefix of hyperparameters train it alike
    (a stage is trained once for all of them).
    """
    return component_seed(master_seed, "stages") & _MASK_31


def step_seed(seed: int, step: int) -> int:
    """Return a seed for the randomness of one step (data order, dropout) under ``seed``: an int
    in ``[0, 2**31)`` that depends on ``(seed, step)`` only, not on how training got there."""
    _check_seed("step", step)
    return component_seed(seed, f"step-{step}") & _MASK_31


__all__ = ["component_seed", "index_rng", "stage_seed", "step_seed", "trial_seed"]
