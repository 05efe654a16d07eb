"""Analysis of a study from its journal: searched dimensions, parameter importance."""
