"""LightningDataModule turning a posed-image dataset into ray batches.

Training batches are random pixels drawn uniformly across all training images, from a rotating window
of images (``images_per_window``), or in proportion to a per-image map of recent error
(``pixel_selection="error"``); pixels that a mask leaves out (``SceneSplit.masks``) are never drawn
(:mod:`nerf_lightning.data.training_rays`: a batch as a function of its key). The training
loader itself only yields batch positions; the rays are drawn in ``on_after_batch_transfer``,
on the training device, from a generator seeded by (seed, rank, batch position). So the
number of rays per batch (``rays_per_batch``, which a callback may change between steps)
takes effect on the very next step despite Lightning prefetching one batch, and the rays of
step ``n`` do not depend on data-loader workers or on where a run was resumed.
With ``prefetch`` the batch of the next position is assembled on a background thread
while a step trains, where the pixel store lives in host memory (:mod:`nerf_lightning.data.prefetch`);
it is served only when everything it depends on is unchanged, so the rays are the same bit for bit
with prefetching on or off. :attr:`NerfDataModule.data_wait_s` is how long the training thread waited
for its latest batch.
Validation and test batches are whole images; ``test_split`` names the split that ``test`` scores
(``train`` measures how well the training views themselves are reproduced, rendered exactly as test
views are).

Where the scene is (``normalise``): by default the cameras stay in the loader's coordinates and the
scene box, near and far come from them as they are. With ``normalise="auto"`` a similarity estimated
once from the training cameras (:mod:`nerf_lightning.scenes.training_frame`) first moves every split
into a frame that is upright, centred on the content and of a known scale, and the box, near and far
are derived there: a recipe then sees every capture alike, wherever its file put it. The box, pixel
footprint, near and far are :func:`~nerf_lightning.data.scene_placement.place_scene`'s, one function of
the training split.

Under data parallelism (``docs/distributed.md``) every rank runs every training step with its
own rays (the rank is part of their seed), the sampler's ``update`` gets a seed without the
rank, the error map is updated from the per-tile error sums of all ranks, and each validation
or test image is rendered by exactly one rank (no padding with repeated images).
"""

from __future__ import annotations

import copy
import math
import os
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor
from torch.utils.data import DataLoader, DistributedSampler

from nerf_lightning.cameras.geometry import Cameras, generate_rays, pixel_grid, subpixel_offsets
from nerf_lightning.cameras.lens import LensModel
from nerf_lightning.core.distributed import all_reduce_sum_, world_size
from nerf_lightning.core.errors import FrameMismatchError
from nerf_lightning.core.types import Rays, SceneBox
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.data.error_map import PixelErrorMap
from nerf_lightning.data.image_windows import ImageWindows
from nerf_lightning.data.prefetch import Prefetcher
from nerf_lightning.data.scene_placement import place_scene
from nerf_lightning.data.seeding import derive_seed
from nerf_lightning.data.training_rays import BatchKey, PixelStore, draw_training_batch, rays_per_side_at
from nerf_lightning.data.training_steps import TrainingSteps
from nerf_lightning.datasets.demo_scene import is_demo_scene_complete, make_demo_scene
from nerf_lightning.scenes.cache import cached_load_split, default_cache_dir
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.fingerprint import dataset_fingerprint
from nerf_lightning.scenes.loading import load_split
from nerf_lightning.scenes.normalise import Similarity
from nerf_lightning.scenes.pixel_budget import downscale_for_capture
from nerf_lightning.scenes.scene import SceneSplit
from nerf_lightning.scenes.training_frame import (
    DeclaredExtent,
    TrainingFrame,
    estimate_training_frame,
    moved_split,
)
from nerf_lightning.scenes.validate import require_valid_dataset

TEST_SPLITS = ("train", "val", "test")
"""The splits ``test_split`` may name."""
NORMALISE = ("none", "auto")
"""The values ``normalise`` may take."""

class NerfDataModule(pl.LightningDataModule):
    """Posed images → batches of rays.

    Args:
        root: dataset folder (Blender ``transforms_{split}.json``, nerfstudio ``transforms.json`` or
            LLFF ``poses_bounds.npy``).
        dataset_format: ``auto`` or a key of ``LOADERS`` (``blender``, ``nerfstudio``, ``llff``).
        background: RGB colour that transparent pixels are composited over (targets and renders).
        random_background: in training, composite each ray's target over a random colour instead,
            and render the ray over the same colour, where the training images have an alpha
            channel (RGBA object scenes such as Blender's): the field cannot then explain a
            transparent pixel with density of the background's colour (instant-ngp's remedy
            against floaters). Evaluation keeps ``background``. Images without alpha train over
            ``background`` as before (a warning says so).
        downscale: integer image downscale factor. Ignored when ``target_pixels`` is set.
        rays_per_batch: rays in each training batch; may be changed between steps.
        steps_per_epoch: training batches per epoch (validation runs at epoch ends).
        scene_box: explicit ``[xmin, ymin, zmin, xmax, ymax, zmax]`` in the loader's coordinates; ``None``
            derives it from the cameras (for splits with a ``depth_range``, such as LLFF: the box of the
            training view frustums). Refused with ``normalise="auto"``, which moves those coordinates.
        scene_box_scale: multiplies the half-size of the derived box.
        unbounded: rays run past the scene box, from the near plane to ``far_scale`` box
            diagonals, instead of being clipped to it: for real captures whose background
            lies beyond any box. Pair it with a field that contracts space beyond the box
            (``contraction``; ``configs/real.yaml``).
        far_scale: how far unbounded rays run, in scene-box diagonals (contraction squeezes
            everything beyond a few diagonals into a thin shell, so the exact value matters little).
        make_demo: generate the embedded demo scene into ``root`` if it is not there yet.
        seed: seed of the ray streams; ``None`` takes the run's ``seed_everything`` value.
        cache: keep decoded images in the memory-mapped image cache (rebuilt when stale). A split's first
            load builds its entry one image at a time, in the memory of a few images however many there
            are, and training reads the entry in place; without the cache every image is decoded into
            memory.
        cache_dir: where the cache lives; ``None`` means ``$XDG_CACHE_HOME/nerf-lightning``
            (``~/.cache/nerf-lightning``).
        pixel_selection: ``uniform`` draws training pixels uniformly; ``error`` draws them in
            proportion to a per-image map of recent per-ray error (updated through
            ``observe_ray_errors``, which the ``ErrorFeedback`` callback calls after each step;
            saved in checkpoints).
        error_map_resolution: tiles along each side of an image in the error map.
        error_map_uniform_fraction: share of rays drawn uniformly even with ``error`` selection
            (the floor that keeps every pixel in play).
        test_split: the split the ``test`` stage scores, whole image by whole image: ``test``, or
            ``train`` (or ``val``) to measure a trained model on views it saw, scored the same way as
            the test views (``benchmarks/generalise.py``'s train-test gap). Training photos are rendered
            as they were fitted (:meth:`image_batch`'s ``as_fitted``): each with what the model learned
            for that photo (appearance code or colour correction, camera correction), so their score is
            how well the model reproduces the photos it learned. ``predict`` always renders ``test``.
        normalise: ``none`` keeps the loader's coordinates. ``auto`` moves every split into the frame
            estimated once from the training cameras (and LLFF depth bounds): upright, centred on the
            content, the median camera distance 4 (forward-facing captures: the nearest depth bound
            1/0.75); only cameras move, never pixels. Blender-layout and LLFF captures are fixed
            points (left exactly as loaded). The box, near and far are then derived in that frame
            (``unbounded`` below); the transform is :attr:`frame_transform`, kept in each split's
            ``world_scale`` / ``world_transform`` (what exports map back through) and in
            checkpoints (:meth:`frame_record`). An explicit ``scene_box`` is refused with it: the
            box would be in coordinates that no longer exist.
        inner_region_cameras: with ``normalise="auto"`` and ``unbounded``, the share ``rho`` of the
            farthest camera's distance (max norm, from the content centre) that the inner region
            reaches: it is the cube about the content centre of half-size ``max(h_c, rho * r_cam)``
            (``h_c`` the content cube's). 1 (the default) holds every camera, as ``unbounded`` does
            without normalising and as mip-NeRF 360 and nerfacto do, but symmetric about the content;
            0 leaves the cameras in the contracted shell. Unused otherwise.
        target_pixels: pixels per image to aim for: the downscale is then chosen per capture from the
            training images' size (:mod:`nerf_lightning.scenes.pixel_budget`; LLFF: among the
            ``images_<f>/`` folders that exist), and ``downscale`` is ignored (not refused: the shipped
            configs set one). ``None`` uses ``downscale``. The chosen factor is
            :attr:`image_downscale`.
        num_workers: threads preparing (decoding, compositing, downscaling) images while the image cache
            builds an entry; ``None``: the CPU cores, at most 4
            (:func:`~nerf_lightning.scenes.cache.default_workers`). The images are the same whatever the
            number. Unused without the cache.
        prefetch: assemble the next training batch on a background thread while the current step trains,
            where the pixel store lives in host memory (training on the CPU: a cold page of the image
            cache's memory map is then read off the training thread). Off by default: with the cache in
            memory a batch costs little, and the thread competes with the step's own threads for the
            same cores (``benchmarks/RESULTS.md``); it is for captures whose cache the page cache cannot
            hold, or a slow disk. On an accelerator the store is
            in device memory and batches are made on the training thread, as without it. A prefetched
            batch is used only when its position, ``rays_per_batch``, device and the error map are
            what the step asks for; otherwise it is dropped and the batch made on the training thread.
            The batches are the same bit for bit either way (``docs/data.md``, "Prefetching").
        images_per_window: draw each step's rays from a window of this many training images instead of
            all of them, the window moving every ``window_steps`` steps through a shuffled cycle of all
            images (:mod:`nerf_lightning.data.image_windows`): a stretch of steps then reads only those
            images' pixels, which keeps reads local when the image cache is larger than the memory
            the process may use. Under data parallelism the ranks of a step use different windows.
            ``None`` (the default): every step draws from all images. Only with uniform
            ``pixel_selection``.
        window_steps: steps each window of ``images_per_window`` is used for.
        supersample: rays per pixel along each axis: a pixel's colour is the mean of ``supersample ** 2``
            rays, one through each cell of a ``supersample x supersample`` grid over the pixel (training: a
            random point of the cell; evaluation: its centre; ``cameras.geometry.subpixel_offsets``). A
            photo's pixel (and a downscaled image's, the more so) is the light over its whole square; a
            centre ray is scored against the colour of edges and thin structures it passes beside, and
            the field fits each training view's pixel grid instead of the scene. ``1``: one ray through
            the centre. Training batches keep ``rays_per_batch`` rays, so hold ``rays_per_batch //
            supersample ** 2`` pixels; whole-image renders cost ``supersample ** 2`` times the rays.
        supersample_from_step: training batches before this step take one ray through each pixel's
            centre, ``supersample ** 2`` times the pixels of a later batch: the coarse scene is fitted
            from more pixels per step, the pixels' area only later. Counted in batch positions, so a
            run is the same after a resume. Scored renders (validation, test, the evaluation report)
            take the rays per pixel of the last training step (:meth:`scored_rays_per_side`): a field
            fitted to pixel centres is scored through pixel centres, one fitted to pixels' areas through
            the cells' centres.
    """

    def __init__(self, root: str | None = None, dataset_format: str = "auto",
                 background: tuple[float, float, float] = (1.0, 1.0, 1.0), random_background: bool = False,
                 downscale: int = 1,
                 rays_per_batch: int = 4096, steps_per_epoch: int = 500,
                 scene_box: list[float] | None = None, scene_box_scale: float = 1.0,
                 unbounded: bool = False, far_scale: float = 1000.0, make_demo: bool = False,
                 seed: int | None = None, cache: bool = True,
                 cache_dir: str | None = None, pixel_selection: Literal["uniform", "error"] = "uniform",
                 error_map_resolution: int = 32, error_map_uniform_fraction: float = 0.25,
                 test_split: Literal["train", "val", "test"] = "test",
                 normalise: Literal["none", "auto"] = "none", inner_region_cameras: float = 1.0,
                 target_pixels: int | None = None, num_workers: int | None = None,
                 prefetch: bool = False, images_per_window: int | None = None,
                 window_steps: int = 64, supersample: int = 1, supersample_from_step: int = 0) -> None:
        super().__init__()
        if supersample_from_step < 0:
            raise ValueError(f"supersample_from_step must be a step >= 0, got {supersample_from_step}")
        if supersample < 1:
            raise ValueError(f"supersample must be a positive number of rays along a pixel's side, "
                             f"got {supersample}")
        if rays_per_batch < 1:
            raise ValueError(f"rays_per_batch must be a positive integer, got {rays_per_batch}")
        if scene_box is not None and len(scene_box) != 6:
            raise ValueError(f"scene_box must be 6 numbers [xmin, ymin, zmin, xmax, ymax, zmax], "
                             f"got {scene_box}")
        if normalise not in NORMALISE:
            raise ValueError(f"normalise must be 'none' or 'auto', got {normalise!r}")
        if scene_box is not None and normalise == "auto":
            raise ValueError("scene_box is in the loader's coordinates, which normalise 'auto' moves; "
                             "expected one of data.scene_box and data.normalise auto, not both")
        if not (math.isfinite(inner_region_cameras) and inner_region_cameras >= 0.0):
            raise ValueError(f"inner_region_cameras must be a finite number >= 0, "
                             f"got {inner_region_cameras}")
        if num_workers is not None and num_workers < 1:
            raise ValueError(f"num_workers must be a positive number of threads, got {num_workers}")
        if images_per_window is not None and images_per_window < 1:
            raise ValueError(f"images_per_window must be a positive number of images or null (all), "
                             f"got {images_per_window}")
        if window_steps < 1:
            raise ValueError(f"window_steps must be a positive number of steps, got {window_steps}")
        if images_per_window is not None and pixel_selection == "error":
            raise ValueError("images_per_window draws rays uniformly inside a window of images; expected "
                             "data.pixel_selection uniform with it, got 'error'")
        if target_pixels is not None and not target_pixels >= 1:
            raise ValueError(f"target_pixels must be a positive number of pixels per image, "
                             f"got {target_pixels}")
        self.root = Path(root) if root is not None else None
        self.supersample = int(supersample)
        self.supersample_from_step = int(supersample_from_step)
        # Whether the checkpoint a validate, test or predict run loaded (its trainer starts at step 0) had
        # trained on several rays per pixel; None: none loaded, or one written before it was recorded.
        self._checkpoint_supersampled: bool | None = None
        self.dataset_format = dataset_format
        self.background = tuple(float(c) for c in background)
        self.random_background = random_background
        self.downscale = downscale
        self._rays_per_batch = int(rays_per_batch)
        self.steps_per_epoch = steps_per_epoch
        self.explicit_scene_box = scene_box
        self.scene_box_scale = scene_box_scale
        if far_scale <= 0:
            raise ValueError(f"far_scale must be a positive number of box diagonals, got {far_scale}")
        self.unbounded = unbounded
        self.far_scale = far_scale
        self.far: float | None = None
        self.make_demo = make_demo
        self.seed = seed
        self.cache = cache
        self.cache_dir = cache_dir
        if pixel_selection not in ("uniform", "error"):
            raise ValueError(f"pixel_selection must be 'uniform' or 'error', got {pixel_selection!r}")
        self.pixel_selection = pixel_selection
        if test_split not in TEST_SPLITS:
            allowed = ", ".join(map(repr, TEST_SPLITS))
            raise ValueError(f"test_split must be one of {allowed}, got {test_split!r}")
        self.test_split = test_split
        self.error_map_resolution = error_map_resolution
        self.error_map_uniform_fraction = error_map_uniform_fraction
        self.error_map: PixelErrorMap | None = None
        self._pending_error_map: dict[str, Any] | None = None
        self.splits: dict[str, SceneSplit] = {}
        self.scene_box: SceneBox | None = None
        self.pixel_footprint: float | None = None
        self.min_near = 0.0
        self._train_store: PixelStore | None = None
        self._lens_models: dict[str, frozenset[LensModel]] = {}  # lens models to undistort
        self.normalise = normalise
        self.inner_region_cameras = float(inner_region_cameras)
        self.target_pixels = target_pixels
        self.num_workers = num_workers
        self.training_frame: TrainingFrame | None = None
        self.declared: DeclaredExtent | None = None
        self._chosen_downscale: int | None = None
        self._pending_frame: dict[str, Any] | None = None
        self.prefetch = prefetch
        self.images_per_window = images_per_window
        self.window_steps = window_steps
        self._prefetcher: Prefetcher[BatchKey, RayBatch] = Prefetcher(name="nerf-batch-prefetch")
        self._inputs_version = 0  # the version in each BatchKey
        self._ahead: tuple[int, torch.device] | None = None  # the position and device to prefetch for
        self.data_wait_s: float | None = None
        """Seconds the training thread waited for its latest training batch (``None`` before the first):
        the whole making of the batch when it was not prefetched, the rest of its making (often nothing)
        when it was. Read by ``Telemetry`` (``telemetry/ms_data_wait``)."""

    @property
    def rays_per_batch(self) -> int:
        """Rays in each training batch; a callback may set it between steps (``SampleBudget``). Setting it
        re-aims the prefetch of the next batch at the new size."""
        return self._rays_per_batch

    @rays_per_batch.setter
    def rays_per_batch(self, value: int) -> None:
        if value < 1:
            raise ValueError(f"rays_per_batch must be a positive integer, got {value}")
        self._rays_per_batch = int(value)
        self._prefetch_ahead()

    # ----------------------------------------------------------------- loading
    def prepare_data(self) -> None:
        if self.make_demo and not is_demo_scene_complete(self._root()):
            make_demo_scene(self._root())

    def _root(self) -> Path:
        if self.root is None:
            raise DatasetError("data.root", "no dataset folder given; expected --data.root DIR")
        return self.root

    @property
    def image_downscale(self) -> int:
        """The downscale the splits are loaded at: ``downscale``, or the factor ``target_pixels`` picks
        (chosen once, from the files' headers)."""
        if self.target_pixels is None:
            return self.downscale
        if self._chosen_downscale is None:
            self._chosen_downscale = downscale_for_capture(self._root(), self.dataset_format,
                                                           self.target_pixels)
        return self._chosen_downscale

    @property
    def frame_transform(self) -> Similarity:
        """Loader coordinates (the file's; LLFF's normalised ones) to the coordinates the scene is trained in:
        the identity with ``normalise="none"``. With ``auto`` it loads the training split if it is not
        loaded yet (the frame is estimated from it). Camera paths given in the loader's coordinates go
        through it; anything rendered or drawn from the splits is in the training frame already."""
        if self.normalise == "none":
            return Similarity.identity()
        self._load("train")
        assert self.training_frame is not None
        return self.training_frame.transform

    def _load(self, split: str) -> SceneSplit:
        if split not in self.splits:
            try:
                options = {"dataset_format": self.dataset_format, "background": self.background,
                           "downscale": self.image_downscale}
                if self.cache:
                    loaded = cached_load_split(self._root(), split, cache_dir=self._cache_dir(),
                                               num_workers=self.num_workers, **options)
                else:
                    loaded = load_split(self._root(), split, **options)
            except DatasetError:
                # Report every problem of the dataset, not only the first one the loader met.
                require_valid_dataset(self._root(), dataset_format=self.dataset_format,
                                      downscale=self._chosen_downscale or self.downscale)
                raise
            if self.normalise == "auto":
                loaded = self._in_training_frame(split, loaded)
            self.splits[split] = loaded
            self._lens_models[split] = loaded.cameras.lens_models()
        return self.splits[split]

    def _in_training_frame(self, split: str, loaded: SceneSplit) -> SceneSplit:
        """``loaded`` moved into the training frame, which the training split sets (loaded first)."""
        if split == "train":
            self.training_frame = estimate_training_frame(loaded)
        elif self.training_frame is None:
            self._load("train")
        assert self.training_frame is not None
        return moved_split(loaded, self.training_frame.transform)

    def _cache_dir(self) -> Path | None:
        return Path(self.cache_dir) if self.cache_dir is not None else None

    def fingerprint(self) -> str:
        """Content hash of the dataset's poses and images (recorded in ``run.json``).

        With the image cache on, file digests are remembered in the cache's folder (the files hashed
        for the cache key are not read again); without it, within this process only.
        """
        memo_dir = (self._cache_dir() or default_cache_dir()) if self.cache else None
        return dataset_fingerprint(self._root(), dataset_format=self.dataset_format, memo_dir=memo_dir)

    def setup(self, stage: str) -> None:
        self._invalidate_batches()  # the box, near and far a batch reads are set again below
        # Loading checks everything and fails with every problem listed before any training.
        train = self._load("train")  # the scene box always comes from the training cameras
        placed = place_scene(train, explicit_box=self.explicit_scene_box, box_scale=self.scene_box_scale,
                             unbounded=self.unbounded, far_scale=self.far_scale, frame=self.training_frame,
                             inner_region_cameras=self.inner_region_cameras)
        self.scene_box, self.pixel_footprint = placed.scene_box, placed.pixel_footprint
        self.min_near, self.far, self.declared = placed.min_near, placed.far, placed.declared
        if self._pending_frame is not None:
            self._check_frame(self._pending_frame)
        if stage == "fit" and self.random_background and train.alphas is None:
            warnings.warn(f"data.random_background: the training images of {self.root} have no alpha "
                          f"channel, so they train over data.background {list(self.background)}",
                          stacklevel=2)
        stage_splits = {"fit": ["val"], "validate": ["val"], "test": [self.test_split], "predict": ["test"]}
        for split in stage_splits[stage]:
            self._load(split)

    def frame_record(self) -> dict[str, Any] | None:
        """What ``normalise`` and ``target_pixels`` decided, JSON-ready; ``None`` when neither is on (or
        before anything was loaded). Saved in checkpoints (:meth:`state_dict`) and checked when one is
        loaded: a field trained in one frame is meaningless in another.

        Keys: ``normalise``; with ``auto``, ``frame`` (:meth:`TrainingFrame.record`: the 4x4 ``matrix``
        from loader to training coordinates and its statistics), ``inner_region_cameras`` and
        ``aabb_scale`` (a declared value found consistent, which sets the far plane of an unbounded
        scene; ``None`` otherwise); with ``target_pixels``, ``target_pixels`` and ``downscale`` (the
        factor chosen).
        """
        record: dict[str, Any] = {}
        if self.normalise == "auto" and self.training_frame is not None:
            record.update(normalise="auto", frame=self.training_frame.record(),
                          inner_region_cameras=self.inner_region_cameras,
                          aabb_scale=None if self.declared is None else self.declared.aabb_scale)
        if self.target_pixels is not None and self._chosen_downscale is not None:
            record.update(target_pixels=self.target_pixels, downscale=self._chosen_downscale)
        if not record:
            return None
        record.setdefault("normalise", self.normalise)
        return record

    def _check_frame(self, saved: dict[str, Any] | None) -> None:
        """Refuse a checkpoint trained in another frame than this data module's (``load_state_dict``)."""
        self._pending_frame = None
        saved_frame = None if saved is None else saved.get("frame")
        if saved_frame is not None and self.normalise != "auto":
            raise FrameMismatchError("normalise: the checkpoint was trained in a normalised frame; "
                                     "expected data.normalise auto to resume or evaluate it")
        if self.normalise != "auto":
            return
        ours = self.frame_transform.matrix()
        theirs = (torch.eye(4, dtype=torch.float64) if saved_frame is None
                  else torch.tensor(saved_frame["matrix"], dtype=torch.float64))
        if not torch.allclose(ours, theirs, rtol=1e-9, atol=1e-9 * float(ours.abs().max())):
            where = "the file's frame (data.normalise none)" if saved_frame is None else "another frame"
            raise FrameMismatchError(f"normalise: the checkpoint was trained in {where}, not the one "
                                     f"estimated from the training cameras of {self.root}; expected the "
                                     "dataset and data.normalise the run was trained with")

    @property
    def num_train_images(self) -> int:
        """Images in the training split (after ``setup``): the size of per-image parameter tables."""
        return len(self._load("train"))

    @property
    def run_seed(self) -> int:
        return self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))

    @property
    def rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    # ------------------------------------------------------------- dataloaders
    def train_dataloader(self) -> TrainingSteps:
        """The epoch's batch positions (:class:`TrainingSteps`: resumable mid-epoch, its state in the
        checkpoint); the rays are drawn in :meth:`on_after_batch_transfer`."""
        steps = range(self.steps_per_epoch)
        if world_size(self.trainer) > 1:
            # Every rank runs every step of an epoch (with rays of its own): a one-replica
            # DistributedSampler keeps Lightning from splitting the steps between ranks.
            sampler = DistributedSampler(steps, num_replicas=1, rank=0, shuffle=False)
            return TrainingSteps(steps, sampler=sampler)
        return TrainingSteps(steps, shuffle=False)

    def _image_dataloader(self, split: str) -> DataLoader:
        images = range(len(self.splits[split]))
        trainer = self.trainer
        if world_size(trainer) > 1:
            # Each image on exactly one rank: Lightning's default DistributedSampler would pad
            # with repeated images, counting them twice in the metrics.
            assert trainer is not None
            sampler = UnrepeatedDistributedSampler(images, num_replicas=trainer.world_size,
                                                   rank=trainer.global_rank, shuffle=False)
            return DataLoader(images, batch_size=None, sampler=sampler)
        return DataLoader(images, batch_size=None, shuffle=False)

    def val_dataloader(self) -> DataLoader:
        return self._image_dataloader("val")

    def test_dataloader(self) -> DataLoader:
        return self._image_dataloader(self.test_split)

    def predict_dataloader(self) -> DataLoader:
        return self._image_dataloader("test")

    # ------------------------------------------------------------ ray batches
    def on_after_batch_transfer(self, batch: int, dataloader_idx: int) -> RayBatch:
        trainer = self.trainer
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        if trainer is not None and trainer.training:
            position = trainer.fit_loop.epoch_loop.batch_progress.total.ready
            return self.train_batch(position, device)
        if trainer is None or trainer.validating or trainer.sanity_checking:
            split = "val"
        else:
            split = self.test_split if trainer.testing else "test"
        return self.image_batch(split, int(batch), device, as_fitted=split == "train")

    def train_batch(self, position: int, device: torch.device) -> RayBatch:
        """``rays_per_batch`` random training rays for the batch at global ``position``.

        Served from the prefetched batch when that was made for this very key, else made here; either way
        :attr:`data_wait_s` records the wait, and the batch of ``position + 1`` is prefetched next.
        """
        store, error_map = self._batch_inputs(device)
        key = self._batch_key(position, device)
        batch = self._prefetcher.request(key, self._draw(store, error_map, key))
        self.data_wait_s = self._prefetcher.last_wait_s
        self._ahead = (position + 1, device)
        self._prefetch_ahead()
        return batch

    def _batch_inputs(self, device: torch.device) -> tuple[PixelStore, PixelErrorMap | None]:
        """The pixel store and error map on ``device``, built or moved here, on the training thread: a
        prefetch job only reads them (the running one is waited for before they change)."""
        store = self._train_store
        moving = self.error_map is not None and self.error_map.device != device
        if store is None or store.device != device or moving:
            self._invalidate_batches()
        if store is None or store.device != device:
            train = self._load("train")
            windows = (ImageWindows(train.images.offsets, self.images_per_window, self.run_seed, device)
                       if self.images_per_window is not None else None)
            store = self._train_store = PixelStore(train, device, self.random_background, windows)
        error_map = self._error_map(device) if self.pixel_selection == "error" else None
        return store, error_map

    def _batch_key(self, position: int, device: torch.device) -> BatchKey:
        return BatchKey(position, self.rays_per_batch, device, self.run_seed, self.rank,
                         world_size(self.trainer), self._inputs_version)

    def _prefetching(self, device: torch.device) -> bool:
        """Prefetch where the pixel store is in host memory: there a batch's gather may read the disk."""
        return self.prefetch and device.type == "cpu"

    def _prefetch_ahead(self) -> None:
        """Schedule the batch after the latest one handed out, with the current settings (a no-op when it
        is scheduled already, or when not prefetching). Called when a batch is handed out and whenever a
        setting it depends on changes between steps (``rays_per_batch``, the error map): the key is
        then the one the next request will have, unless something else changes before it."""
        if self._ahead is None or self._train_store is None:
            return
        position, device = self._ahead
        if not self._prefetching(device) or self._train_store.device != device:
            return
        store, error_map = self._train_store, None
        if self.pixel_selection == "error":
            if self.error_map is None or self.error_map.device != device:
                return
            # The job draws from a copy of the map as it is now: the map moves after every step, while
            # the job may still run (its batch is then stale, never served: the version in its key).
            error_map = copy.copy(self.error_map)
            error_map.errors = self.error_map.errors.clone()
        key = self._batch_key(position, device)
        self._prefetcher.schedule(key, self._draw(store, error_map, key))

    def _draw(self, store: PixelStore, error_map: PixelErrorMap | None,
              key: BatchKey) -> Callable[[], RayBatch]:
        """What makes the training batch of ``key`` (:func:`draw_training_batch`), on whichever thread."""
        return partial(draw_training_batch, store, error_map, key, window_steps=self.window_steps,
                       make_rays=partial(self._rays, split="train"), background=self.background,
                       supersample=self.supersample, supersample_from=self.supersample_from_step)

    def _invalidate_batches(self) -> None:
        """Before state a batch reads changes (the pixel store, a loaded error map, the box): wait for a
        running prefetch, drop what was prefetched and bump the version in batch keys (nothing made
        before is served after)."""
        self._prefetcher.discard()
        self._inputs_version += 1

    def teardown(self, stage: str) -> None:
        """End prefetching (the worker thread, a batch made ahead for a step that will not run)."""
        self._ahead = None
        self._prefetcher.close()

    def on_exception(self, exception: BaseException) -> None:
        """End prefetching when a fit fails; a prefetch job's own failure is added to ``exception`` as a
        note rather than replacing it."""
        self._ahead = None
        try:
            self._prefetcher.close()
        except BaseException as error:  # reported on the exception being raised
            exception.add_note(f"the batch prefetch failed too: {error!r}")

    # ------------------------------------------------------- error-driven rays
    def _error_map(self, device: torch.device) -> PixelErrorMap:
        if self.error_map is None:
            train = self._load("train")
            self.error_map = PixelErrorMap(train.images.shapes, self.error_map_resolution,
                                           self.error_map_uniform_fraction, device=device, kept=train.masks)
            if self._pending_error_map is not None:
                self.error_map.load_state_dict(self._pending_error_map)
                self._pending_error_map = None
        elif self.error_map.device != device:
            self.error_map.to(device)
        return self.error_map

    def observe_ray_errors(self, batch: RayBatch, errors: Tensor) -> None:
        """Report per-ray errors ``[R']`` of the leading ``R' <= R`` rays of a training ``batch``
        (a step may leave the tail of its batch out; no-op for uniform selection).

        Under data parallelism every rank calls this at the same step: the per-tile error sums
        and counts are summed over ranks (one all-reduce of ``2 x tiles`` floats) before the map
        moves, so the maps of all ranks stay identical.
        """
        if self.pixel_selection != "error" or batch.pixel_indices is None:
            return
        error_map = self._error_map(errors.device)
        sums = error_map.tile_sums(batch.pixel_indices[: errors.shape[0]], errors.detach())
        error_map.apply_tile_sums(all_reduce_sum_(sums, self.trainer))
        # The map moved: a batch drawn from it before is stale (a running prefetch job reads its own
        # copy of the map and is not waited for; its batch is never served, its key's version is old).
        self._inputs_version += 1
        self._prefetch_ahead()  # the next batch, from the moved map

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self.error_map is not None:
            state["error_map"] = self.error_map.state_dict()
        elif self._pending_error_map is not None:
            state["error_map"] = self._pending_error_map
        record = self.frame_record()
        if record is not None:
            state["frame"] = record
        if self.supersample > 1:
            state["supersampled"] = self.scored_rays_per_side() > 1
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._invalidate_batches()  # nothing prefetched survives a loaded state (the prefetcher has none)
        self._ahead = None
        self._checkpoint_supersampled = state_dict.get("supersampled")
        frame = state_dict.get("frame")
        if frame is not None or self.normalise == "auto":
            if self.normalise == "auto" and self.training_frame is None:
                self._pending_frame = frame or {}  # checked at the end of setup, once the frame is known
            else:
                self._check_frame(frame)
        state = state_dict.get("error_map")
        if state is None:
            return
        if self.error_map is not None:
            self.error_map.load_state_dict(state)
        else:
            self._pending_error_map = state  # restored when the map is built on the training device

    def scored_rays_per_side(self) -> int:
        """Rays along a pixel's side in a scored render: ``supersample`` once a training step has taken
        several rays per pixel (or when ``supersample_from_step`` is 0), else 1.

        A field trained on pixel centres only renders best through pixel centres, and averaging cell
        centres would score it on rays it never fitted; the switch follows the training steps, not the
        clock, so a run's scores do not depend on how fast the machine reached ``supersample_from_step``.
        The trainer's step decides, except in a validate, test or predict run from a checkpoint (whose
        trainer starts at step 0): that takes what the checkpoint recorded, and ``supersample`` when it
        was written before checkpoints recorded it.
        """
        if self.supersample == 1 or self.supersample_from_step == 0:
            return self.supersample
        trainer = self.trainer
        if trainer is None:
            return 1  # no training step taken
        if trainer.state.fn != TrainerFn.FITTING and trainer.ckpt_path is not None:
            return 1 if self._checkpoint_supersampled is False else self.supersample
        # As the last training batch had them: that of position global_step - 1.
        return rays_per_side_at(trainer.global_step - 1, self.supersample, self.supersample_from_step)

    def image_batch(self, split: str, index: int, device: torch.device, centres: bool = False,
                    as_fitted: bool = False) -> RayBatch:
        """Every pixel of image ``index`` of ``split``, row-major (with its mask, if the split has masks),
        each through the centres of its cells, :meth:`scored_rays_per_side` of them along each side;
        ``centres``: one ray through each pixel's centre whatever ``supersample`` (what needs a ray per
        pixel: point clouds, exports). ``as_fitted`` (``split`` ``train`` only): the rays name their
        training image (``camera_indices``), so the module renders the photo with its own per-image
        parameters (appearance code, camera correction), as training saw it; otherwise every view is
        rendered as a new one."""
        if as_fitted and split != "train":
            raise ValueError(f"as_fitted renders a training photo as it was fitted: split must be 'train', "
                             f"got {split!r}")
        scene = self._load(split)
        mask = scene.mask(index)
        image = scene.images[index]
        height, width = image.shape[:2]
        cameras = scene.cameras.to(device)
        cols, rows = pixel_grid(width, height, device)
        per_axis = 1 if centres else self.scored_rays_per_side()
        offsets = None
        if per_axis > 1:
            offsets = subpixel_offsets(per_axis, len(cols), device)
            cols, rows = cols.repeat_interleave(per_axis**2), rows.repeat_interleave(per_axis**2)
        camera = torch.full_like(cols, index)
        rays = self._rays(cameras, camera, cols, rows, offsets, split=split)
        return RayBatch(rays=rays, rgb=image.reshape(-1, 3).to(device), background=self._background(device),
                        sampler_seed=derive_seed(self.run_seed, index), image_index=index,
                        image_size=(height, width), rays_per_pixel=per_axis**2,
                        camera_indices=camera if as_fitted else None,
                        mask=None if mask is None else mask.reshape(-1).to(device))

    def _rays(self, cameras: Cameras, camera: Tensor, cols: Tensor, rows: Tensor, offsets: Tensor | None,
              split: str) -> Rays:
        assert self.scene_box is not None, "setup() must run before batches are made"
        return generate_rays(cameras, camera, cols, rows, self.scene_box, self.min_near,
                             undistort=self._lens_models[split], far=self.far, offsets=offsets)

    def _background(self, device: torch.device) -> Tensor:
        return torch.tensor(self.background, dtype=torch.float32, device=device)
