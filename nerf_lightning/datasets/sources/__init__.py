"""Sources that ``data convert`` reads: a COLMAP model (text or binary) and an LLFF capture, each
turned into checked :class:`~nerf_lightning.datasets.sources.frame.Frame` lists."""
