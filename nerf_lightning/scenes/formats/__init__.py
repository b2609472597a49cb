"""The dataset formats nerf-lightning reads: one module per format says what its files hold, its
conventions, and how it becomes a :class:`~nerf_lightning.scenes.scene.SceneSplit` (loaders). The
sources of ``nerf-lightning data convert`` (to a nerfstudio ``transforms.json``) live in
:mod:`nerf_lightning.datasets.sources`.

==========  ===============================================  ==================  ======================
format      files                                            used by             modules
==========  ===============================================  ==================  ======================
blender     ``transforms_{split}.json`` + images             loader              :mod:`.blender`
nerfstudio  ``transforms.json`` + images (also instant-ngp)  loader              :mod:`.nerfstudio`
llff        ``poses_bounds.npy`` + ``images*/``              loader, convert     :mod:`.llff`,
                                                                                 ``datasets.sources.llff``
colmap      ``cameras`` + ``images`` ``.bin``/``.txt``       convert             ``datasets.sources.colmap``,
                                                                                 ``...colmap_model`` (files)
==========  ===============================================  ==================  ======================

Shared: :mod:`.common` (downscale factor, image preparation, cameras from intrinsics: every loader),
:mod:`.transforms_json` (JSON file, frames, poses and image paths of the two ``transforms*.json``
formats) and :mod:`nerf_lightning.datasets.sources.frame` (what a ``data convert`` source reader
returns). The nerfstudio loader's cameras (``camera_model`` and its coefficients) and instant-ngp's
``scale`` / ``offset`` / ``aabb_scale`` are read by :mod:`.nerfstudio_cameras`.

Around them: :mod:`nerf_lightning.scenes.loading` registers the loaders and detects a folder's format,
:mod:`nerf_lightning.scenes.validate` checks a dataset with the loaders' checks,
:mod:`nerf_lightning.scenes.fingerprint` knows which files of each format to hash, and
:mod:`nerf_lightning.datasets.convert` writes a source as ``transforms.json``. Conventions (camera axes,
pixel centres) are defined once, in :mod:`nerf_lightning.cameras.geometry`.
"""
