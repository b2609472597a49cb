"""Layer ``datasets``: making datasets: ``data convert`` (COLMAP and LLFF sources to
``transforms.json``, with image placement), ``data process`` (photos or a video through
structure-from-motion), the procedural demo scene and the scene suite (:mod:`.scene_suite`: procedural
scenes in every format we read, each stressing one thing a training recipe may be tuned to).

May import ``core``, ``files``, ``cameras`` and ``scenes`` (it writes what ``scenes`` reads).
"""
