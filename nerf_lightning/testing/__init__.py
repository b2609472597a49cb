"""Layer ``testing``: the kit for sampler authors: check any sampler against the contract of
``docs/samplers.md``.

Call :func:`check_sampler` from your plugin's tests::

    from nerf_lightning.testing import check_sampler

    def test_contract():
        print(check_sampler(MySampler()))

It runs the sampler on a small fixed synthetic scene (a soft spherical shell of density inside
the cube ``[-1.5, 1.5]^3``, rays from a ring of cameras, a camera inside the box and three
rays that miss it), its export hook ``standalone(field)`` too when it has one, and raises
``AssertionError`` naming the first rule the sampler breaks, for example::

    check_sampler(MySampler): rule 'sorted within each ray' broken in train mode (32-ray bundle):
    ray 3, its sample 5 (packed index 245) starts at t=0.71, before the previous sample of its
    ray, which starts at t=0.74

On success it returns a :class:`SamplerReport`, whose ``str()`` is one line saying what held and
what did not apply::

    check_sampler(MySampler): 32 rules hold on cpu; standalone() gives MySamplerSteps, the eval
    samples bitwise; not checked: 'cuda matches cpu' (no CUDA device), 'gradients reach the
    parameters' (no trainable parameters)

The sampler passed in is not modified: every check runs on deep copies of it, so its mode,
device, buffers and parameters are as before, and so is torch's global random state.

The scene is available to your own tests as :func:`synthetic_rays`, :func:`synthetic_density`,
:func:`synthetic_scene_box` and :func:`synthetic_field` (the density as the torch-only field module
that ``standalone(field)`` receives).

Modules: :mod:`.check` (the rules, in order), :mod:`.rules` (what a sampler's output must satisfy and
how a broken rule is reported), :mod:`.scene` (the synthetic scene). May import ``core``, ``nn``,
``rendering`` and ``samplers`` (the contract it checks), nothing above them.
"""

from nerf_lightning.testing.check import SamplerReport, check_sampler
from nerf_lightning.testing.rules import SamplerContractError
from nerf_lightning.testing.scene import (
           synthetic_density,
           synthetic_field,
           synthetic_rays,
           synthetic_scene_box,
)

__all__ = ["SamplerContractError", "SamplerReport", "check_sampler", "synthetic_density", "synthetic_field",
           "synthetic_rays", "synthetic_scene_box"]
