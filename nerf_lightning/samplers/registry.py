"""Discovery of samplers through the ``nerf_lightning.samplers`` entry-point group.

Built-in samplers are registered in the project's own ``pyproject.toml`` exactly as a third
party registers theirs. Loading a sampler imports its class, which makes it selectable by
its short class name on the command line (``--model.sampler=Uniform``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from importlib.metadata import entry_points

from nerf_lightning.samplers.base import Sampler

ENTRY_POINT_GROUP = "nerf_lightning.samplers"


@dataclass(frozen=True)
class SamplerPlugin:
    """A loaded sampler entry point."""

    name: str
    target: str
    distribution: str | None
    version: str | None
    sampler_class: type[Sampler]


def load_sampler_plugins() -> dict[str, SamplerPlugin]:
    """Import every sampler registered in the entry-point group.

    A plugin that fails to import, or that does not name a ``Sampler`` subclass, gives one
    warning naming the plugin and the error; the others still load.

    Returns:
        Loaded plugins by entry-point name.
    """
    plugins: dict[str, SamplerPlugin] = {}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        dist = entry_point.dist
        try:
            loaded = entry_point.load()
        except Exception as error:
            warnings.warn(
                f"sampler plugin '{entry_point.name}' ({entry_point.value}"
                f"{f', from {dist.name}' if dist else ''}) failed to load: "
                f"{type(error).__name__}: {error}",
                stacklevel=2,
            )
            continue
        if not (isinstance(loaded, type) and issubclass(loaded, Sampler)):
            warnings.warn(
                f"sampler plugin '{entry_point.name}' ({entry_point.value}) is not a subclass of "
                "nerf_lightning.samplers.Sampler; ignored",
                stacklevel=2,
            )
            continue
        plugins[entry_point.name] = SamplerPlugin(
            name=entry_point.name,
            target=entry_point.value,
            distribution=dist.name if dist else None,
            version=dist.version if dist else None,
            sampler_class=loaded,
        )
    return plugins
