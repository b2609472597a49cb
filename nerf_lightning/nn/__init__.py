"""Layer ``nn``: neural building blocks shared by fields and samplers: input encodings (frequency,
spherical harmonics, the multiresolution hash grid and its kernels), scene contraction for unbounded
scenes, and frozen copies of modules for export.

Fields and samplers never import each other; what both need lives here. May import ``core`` only.
"""
