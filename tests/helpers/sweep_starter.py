"""One warm-start server for the ``nerf-lightning sweep`` commands that a test module runs in its own
process (by the entry point), instead of one per command.

The command starts its trials' fit and test through a :class:`~nerf_lightning.core.warm_start.WarmStarter`
of its own, whose server imports torch and Lightning (seconds of CPU) and ends with the command. Under
:func:`one_warm_server` every such command gets one shared starter that outlives it, so only the first
pays for the imports. Each trial is still a process of its own, forked from the server as every sweep's
trials are; a worker run as a process of its own keeps its own server.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, Any

import pytest

from nerf_lightning.core.warm_start import ChildProcess, WarmStarter

COMMAND_STARTER = "nerf_lightning.commands.sweep.WarmStarter"
"""The name by which the ``sweep`` command makes its starter."""


class KeptOpen(WarmStarter):
    """A warm starter that outlives the ``sweep`` commands given it: they close it at their end, this one
    closes only at :meth:`close_now`. Its children's environment is the caller's less
    ``PYTEST_CURRENT_TEST``, which pytest changes with each test and phase (a server serves only the
    environment it was started with: another one would start every later trial cold)."""

    def start(self, argv: Sequence[str], output: IO[bytes], env: Mapping[str, str]) -> ChildProcess:
        return super().start(argv, output, {k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"})

    def close(self) -> None:
        pass

    def close_now(self) -> None:
        if self._server is not None:  # idle: ended at once, spared the teardown of its imports
            self._server.terminate()
        super().close()


@contextmanager
def one_warm_server() -> Iterator[None]:
    """While the block runs, the ``sweep`` commands run in this process start their trials through one
    shared :class:`KeptOpen`, made as the command makes its own (the same module and preloaded imports)."""
    shared: list[KeptOpen] = []

    def starter(module: str, preload: Any = ()) -> KeptOpen:
        if not shared:
            shared.append(KeptOpen(module, preload))
        assert (shared[0].module, shared[0].preload) == (module, list(preload))
        return shared[0]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(COMMAND_STARTER, starter)
        try:
            yield
        finally:
            for kept in shared:
                kept.close_now()
