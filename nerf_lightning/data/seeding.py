"""Deterministic seeds derived from a tuple of integers (run seed, rank, batch, stream)."""

from __future__ import annotations

_MASK64 = (1 << 64) - 1


def _splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def derive_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from integers; different tuples give unrelated seeds."""
    state = 0
    for part in parts:
        state = _splitmix64(state ^ (part & _MASK64))
    return state & ((1 << 63) - 1)
