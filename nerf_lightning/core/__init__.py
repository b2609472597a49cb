"""Layer ``core``: what every other layer shares and nothing else: the shared types (rays, packed
samples, scene box), component specs (how a field, sampler or renderer records its constructor
arguments), the exceptions reported as one line, the data-parallel helpers, and warm-started command
processes (for the layers that run commands as children: pipeline stages, sweep trials).

Imports nothing from the package: every layer may import it.
"""
