"""The dataset formats nerf-lightning reads: one module per format says what its files hold, its
conventions, and how it becomes a :class:`~nerf_lightning.scenes.scene.SceneSplit` (loaders) or a
nerfstudio ``transforms.json`` (``nerf-lightning data convert`` sources).

==========  ===============================================  ==================  ======================
format      files                                            used by             modules
==========  ===============================================  ==================  ======================
blender     ``transforms_{split}.json`` + images             loader              :mod:`.blender`
nerfstudio  ``transforms.json`` + images (also instant-ngp)  loader              :mod:`.nerfstudio`
llff        ``poses_bounds.npy`` + ``images*/``              loader, convert     :mod:`.llff`,
                                                                                 :mod:`.llff_convert`
colmap      ``cameras`` + ``images`` ``.bin``/``.txt``       convert             :mod:`.colmap` (files),
                                                                                 :mod:`.colmap_convert`
==========  ===============================================  ==================  ======================

Shared: :mod:`.common` (downscale factor, image preparation, cameras from intrinsics: every loader),
:mod:`.transforms_json` (JSON file, frames, poses and image paths of the two ``transforms*.json``
formats) and :mod:`.source` (what a ``data convert`` source reader returns). The nerfstudio loader's
cameras (``camera_model`` and its coefficients) and instant-ngp's ``scale`` / ``offset`` / ``aabb_scale``
are read by :mod:`.nerfstudio_cameras`.

Around them: :mod:`nerf_lightning.scenes.loading` registers the loaders and detects a folder's format,
:mod:`nerf_lightning.scenes.validate` checks a dataset with the loaders' checks,
:mod:`nerf_lightning.scenes.fingerprint` knows which files of each format to hash, and
:mod:`nerf_lightning.datasets.convert` writes a source as ``transforms.json``. Conventions (camera axes,
pixel centres) are defined once, in :mod:`nerf_lightning.cameras.geometry`.
"""
