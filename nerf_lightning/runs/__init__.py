"""Run bookkeeping: atomic checkpoints, run records (run.json) and their comparison."""
