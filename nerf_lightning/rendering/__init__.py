"""Layer ``rendering``: volume rendering over packed samples (the renderer and its pure functions), chunked
evaluation, colour maps, camera paths and video files.

May import ``core``, ``files``, ``cameras``; nothing else of the package.
"""
