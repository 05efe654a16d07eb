"""``hpctune report``: a study as one static HTML page with interactive plots, and PNGs."""
