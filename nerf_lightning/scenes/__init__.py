"""Layer ``scenes``: the scene model and the datasets on disk: a split's images, cameras and bounds,
the formats read (Blender, nerfstudio/instant-ngp, LLFF), format detection and loading, validation
(every problem at once), the verified image cache and dataset fingerprints.

May import ``core``, ``files`` and ``cameras``. Knows nothing of training, fields or samplers.
"""
