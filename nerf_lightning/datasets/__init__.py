"""Layer ``datasets``: making datasets: ``data convert`` (COLMAP and LLFF sources to
``transforms.json``, with image placement), ``data process`` (photos or a video through
structure-from-motion) and the procedural demo scene.

May import ``core``, ``files``, ``cameras`` and ``scenes`` (it writes what ``scenes`` reads).
"""
