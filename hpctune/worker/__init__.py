"""The worker and the training API: :mod:`.loop` (``python -m hpctune.worker.loop``: take
assignments, run segments) and :mod:`.context` (the ``ctx`` a training function is given)."""
