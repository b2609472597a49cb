"""Chunked no-grad field queries: the same values as one call, in pieces."""

from __future__ import annotations

import pytest
import torch

from nerf_lightning.core.types import Rays, SceneBox
from nerf_lightning.fields import HashGridField
from nerf_lightning.rendering.chunks import map_chunks
from nerf_lightning.samplers import Hierarchical, OccupancyGrid, Uniform
from nerf_lightning.system.module import NerfModule


def test_map_chunks_calls_in_pieces_and_keeps_row_order() -> None:
    calls: list[int] = []

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(a.shape[0])
        return a * 2, a + b

    a, b = torch.arange(10.0), torch.ones(10)
    doubled, summed = map_chunks(fn, a, b, chunk_size=4)
    assert calls == [4, 4, 2]
    assert torch.equal(doubled, a * 2) and torch.equal(summed, a + 1)
    assert torch.equal(map_chunks(lambda x: x + 1, torch.zeros(0, 3), chunk_size=4), torch.zeros(0, 3) + 1)
    with pytest.raises(ValueError, match="chunk_size"):
        map_chunks(fn, a, b, chunk_size=0)
    with pytest.raises(ValueError, match=r"^eval_chunk_samples must be a positive"):
        NerfModule(eval_chunk_samples=0)


def _rays(count: int, generator: torch.Generator) -> Rays:
    jitter = 0.2 * torch.randn(count, 3, generator=generator)
    origins = torch.tensor([0.0, 0.0, -3.0]).expand(count, 3) + jitter
    directions = torch.nn.functional.normalize(
        torch.tensor([0.0, 0.0, 1.0]) + 0.2 * torch.randn(count, 3, generator=generator), dim=-1)
    return Rays(origins.contiguous(), directions, torch.full((count,), 1.0), torch.full((count,), 5.0))


@pytest.mark.parametrize("sampler", [Uniform, Hierarchical, OccupancyGrid])
def test_chunked_evaluation_renders_what_one_call_renders(sampler: type) -> None:
    torch.manual_seed(0)
    box = SceneBox(torch.full((3,), -1.5), torch.full((3,), 1.5))
    field = HashGridField(num_levels=4, log2_hashmap_size=12, hidden_dim=16)
    model = NerfModule(field=field, sampler=sampler())
    model.set_scene_box(box)
    with torch.no_grad():  # some density, so the samplers have something to place samples by
        model.field.encoding.table.normal_(0.0, 1.0)
    model.eval()
    rays, background = _rays(64, torch.Generator().manual_seed(1)), torch.ones(3)
    field_calls: list[int] = []
    model.field.register_forward_hook(lambda module, inputs, output: field_calls.append(inputs[0].shape[0]))
    with torch.no_grad():
        model.eval_chunk_samples = 1 << 30
        whole, whole_samples = model.render_rays(rays, background)
        assert field_calls == [len(whole_samples)]
        model.eval_chunk_samples = 37  # far fewer than the samples of 64 rays
        pieces, piece_samples = model.render_rays(rays, background)
    assert len(whole_samples) > 37 * 3
    assert max(field_calls[1:]) == 37 and sum(field_calls[1:]) == len(piece_samples)
    assert torch.equal(whole_samples.ray_indices, piece_samples.ray_indices)
    torch.testing.assert_close(pieces.rgb, whole.rgb, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(pieces.depth, whole.depth, rtol=1e-5, atol=1e-5)
