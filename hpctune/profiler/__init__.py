"""Profiles for the elastic planner: measured by running a study briefly at each size
(:mod:`.measure`, :mod:`.study`), or read from recorded traces and finished studies
(:mod:`.from_traces`)."""
