"""The paper's experiments on top of training: its figures and variants (paper), grids of runs
(sweep), the paper's tables as sweeps (reproduce), their text (tables), figures (plots) and HTML
pages (report)."""
