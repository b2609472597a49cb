"""Layer ``sweeps``: ``nerf-lightning sweep --config SWEEP.yaml``: many recorded runs of one recipe over a
search space, chosen and ranked by Optuna in a study kept in a relational database.

Modules: :mod:`.space` (the search space: parameters over config keys, their values for a trial, the
trial's config written from the base config), :mod:`.spec` (the sweep file's fields, checked),
:mod:`.runner` (the study: each trial an ordinary ``fit`` then ``test`` in a subprocess, its run folder
and record like any run's). The command is :mod:`nerf_lightning.commands.sweep`.

Rules:

- A trial is a run like any other: ``SWEEP/trials/trial-NNNN`` holds its ``run.json``, events,
  checkpoints and ``test`` folder, and ``trial.json`` says which study and trial it was, with its
  parameters. It can be resumed, tested, compared and exported as a run.
- Results travel in files: the objective is read from the run's records, never from printed text.
- Its seed comes from the sweep's seed and the trial's number (:func:`.space.trial_seed`), and the search's
  own sampler is seeded from the sweep's seed: the same file gives the same trials, and on a CPU the
  same numbers.
- The study lives in the storage Optuna is given (an SQLAlchemy URL; default an SQLite file in the
  sweep folder), so a stopped sweep started again goes on where it stopped, counting the trials that
  finished.

May import ``core``, ``files``, ``config`` and ``runs``; nothing that trains (trials are subprocesses).
"""
