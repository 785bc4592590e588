"""The paper's experiments on top of training: its figures and variants (paper), grids of runs and
the ready-made tables (sweep), their text (tables), figures (plots) and HTML pages (report)."""
