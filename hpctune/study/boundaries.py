"""Evaluation boundaries: the steps at which a worker checkpoints and hears the controller.

A trial's steps are judged at its study's *boundaries* (``[study] boundary``): every multiple of
the boundary, and the last step of the segment a worker was assigned (``until_step``), where the
segment ends whatever the policy says. The worker, the scheduling core (which turns a report at a
boundary into a BOUNDARY event), the simulated workers and the policies that decide at
boundaries all ask :func:`at_boundary`, so the rule is written once.
"""

from __future__ import annotations

from collections.abc import Collection


def at_boundary(step: int, boundary: int, until_step: int | None = None) -> bool:
    """Whether ``step`` is a boundary: a multiple of ``boundary`` or, with ``until_step`` (the
    segment's last step), that step or a later one."""
    return step % boundary == 0 or (until_step is not None and step >= until_step)


def checkpoint_due(
    step: int, boundary: int, until_step: int, checkpoint_steps: Collection[int] = ()
) -> bool:
    """Whether a worker saves a checkpoint after ``step``: at a boundary (:func:`at_boundary`,
    the segment's end included) and, over a stage tree, at the end of every stage
    (``checkpoint_steps``), where other trials branch off."""
    return at_boundary(step, boundary, until_step) or step in checkpoint_steps


__all__ = ["at_boundary", "checkpoint_due"]
