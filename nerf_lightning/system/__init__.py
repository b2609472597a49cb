"""Layer ``system``: the LightningModule (:class:`~nerf_lightning.system.module.NerfModule`), what the
callbacks may rely on it and its data module for (:mod:`.contract`), and what only the training process
uses: the learning-rate schedule, which steps log, stage timing, and the process-wide settings the
Lightning commands make (host allocator, oneDNN).

Wires field, sampler and renderer into training steps. May import ``core``, ``nn``, ``cameras``,
``rendering``, ``fields``, ``samplers``, ``scenes``, ``data`` and ``evaluation``; callbacks, runs,
the viewer and the commands sit above it.
"""
