"""Layer ``core``: what every other layer shares and nothing else: the shared types (rays, packed
samples, scene box), component specs (how a field, sampler or renderer records its constructor
arguments), the exceptions reported as one line, and the data-parallel helpers.

Imports nothing from the package: every layer may import it.
"""
