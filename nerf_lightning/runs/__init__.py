"""Layer ``runs``: run bookkeeping: run folders (named, claimed atomically, taken by every command),
atomic checkpoints, run records (run.json), their comparison and trained runs loaded back.

May import ``core``, ``files``, ``config``, ``samplers``, ``scenes``, ``data``, ``system``; nothing else
of the package.
"""
