"""The study and its space: the study.toml spec, search spaces and schedules, metric names,
seeds, and training replays (a new study that re-runs a lineage)."""
