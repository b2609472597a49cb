"""Layer ``data``: what training draws: the datamodule, ray batches, error-driven pixel selection, random
backgrounds.

May import ``core``, ``files``, ``cameras``, ``scenes``, ``datasets``; nothing else of the package.
"""
