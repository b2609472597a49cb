"""Layer ``evaluation``: per-view evaluation of a test run: metrics, the report files and the worst-views
grid.

May import ``core``, ``files``, ``cameras``, ``scenes``; nothing else of the package.
"""
