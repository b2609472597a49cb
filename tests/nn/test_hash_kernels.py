"""The hash grid's kernels compiled by torch.compile: same features and gradients as eager, any
sample count after the first compile, bitwise repeatable, and a compiler failure falls back to eager."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from nerf_lightning.fields import HashGridField
from nerf_lightning.nn.encodings import HashGridEncoding

pytestmark = pytest.mark.slow  # each compile takes seconds

# 6 levels up to 256 cells: two dense, four hashed into 2^14 rows.
GRID = {"num_levels": 6, "features_per_level": 2, "log2_hashmap_size": 14, "base_resolution": 8,
        "max_resolution": 256}


def _encoding(compiled: bool) -> HashGridEncoding:
    torch.manual_seed(0)
    encoding = HashGridEncoding(**GRID, compiled=compiled)
    with torch.no_grad():
        encoding.table.normal_()
    return encoding


def _features_and_grad(encoding: HashGridEncoding, points: torch.Tensor,
                       grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    positions = points.clone().requires_grad_(True)
    encoding.table.grad = None
    features = encoding(positions)
    features.backward(grad_out)
    return features.detach(), encoding.table.grad.clone(), positions.grad.clone()


def test_compiled_kernels_match_eager_for_every_sample_count() -> None:
    from torch._dynamo.utils import counters  # here, not at collection: importing Dynamo takes seconds

    eager, compiled = _encoding(False), _encoding(True)
    generator = torch.Generator().manual_seed(1)
    graphs = counters["stats"]
    compiled_at_first = None
    for count in (1000, 1731, 517):  # the first compiles S as a symbol, the others reuse the kernels
        points = torch.rand(count, 3, generator=generator)
        grad_out = torch.randn(count, eager.output_dim, generator=generator)
        want = _features_and_grad(eager, points, grad_out)
        got = _features_and_grad(compiled, points, grad_out)
        for name, a, b in zip(("features", "table gradient", "position gradient"), want, got, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, msg=f"{name} at S={count}")
        with torch.no_grad():  # evaluation (no autograd) takes the compiled kernels too
            torch.testing.assert_close(compiled(points), want[0], rtol=1e-5, atol=1e-5)
        if compiled_at_first is None:
            compiled_at_first = graphs["unique_graphs"]
        assert graphs["unique_graphs"] == compiled_at_first, f"S={count} compiled the kernels again"


def test_compiled_field_trains_bitwise_repeatably_on_two_threads() -> None:
    """Two runs of 12 Adam steps of the compiled field on two threads give identical weights."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        results = []
        for _ in range(2):
            torch.manual_seed(0)
            field = HashGridField(num_levels=8, log2_hashmap_size=15, max_resolution=256, compiled=True)
            optimizer = torch.optim.Adam(field.parameters(), lr=1e-2)
            generator = torch.Generator().manual_seed(3)
            for step in range(12):
                count = 6000 + 37 * step  # a new sample count every step, as SampleBudget gives
                positions = torch.rand(count, 3, generator=generator) * 2 - 1
                directions = torch.nn.functional.normalize(torch.randn(count, 3, generator=generator), dim=-1)
                density, rgb = field(positions, directions)
                loss = (rgb - 0.5).square().mean() + density.mean() * 1e-3
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            results.append({k: v.clone() for k, v in field.state_dict().items()})
        a, b = results
        assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    finally:
        torch.set_num_threads(threads)


def test_a_failing_compiler_falls_back_to_eager_with_one_warning(tmp_path) -> None:
    """A C++ compiler that does not exist (a fresh process, an empty Inductor cache): one warning
    naming the failure, then the eager kernels' features."""
    code = textwrap.dedent(f"""
        import logging, torch
        import torch._inductor.config as inductor
        inductor.cpp.cxx = ("/nonexistent/c++",)
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
        from nerf_lightning.nn.encodings import HashGridEncoding
        torch.manual_seed(0)
        compiled = HashGridEncoding(**{GRID!r}, compiled=True)
        eager = HashGridEncoding(**{GRID!r})
        eager.load_state_dict(compiled.state_dict())
        points = torch.rand(300, 3)
        assert torch.equal(compiled(points), eager(points))
        assert torch.equal(compiled(points), eager(points))
        print("same features")
    """)
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "PATH": "/usr/bin:/bin",
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "same features" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "could not be compiled" in line]
    assert len(warnings) == 1, done.stderr[-3000:]
    assert warnings[0].startswith("nerf_lightning.nn.hash_kernels: ")
