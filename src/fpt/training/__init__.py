"""Training a run: its config (config), building its task and model (build), the loop (loop), its
checkpoint, evaluation, run directory (run_dir), speed, many processes (distributed), and the entry
points train(), resume() and load_run() (lifecycle)."""
