"""``make demo``: train on the embedded demo scene, test the result, say where to look.

python -m nerf_lightning.demo --config demo --root-dir runs
"""

from __future__ import annotations

import argparse
import sys

from nerf_lightning.commands.lightning import run_lightning_cli
from nerf_lightning.config.lookup import ConfigNotFoundError, resolve_config
from nerf_lightning.core.subnormal import flush_subnormals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="demo",
                        help="a config file or a shipped config's name (default: demo)")
    parser.add_argument("--root-dir", default="runs",
                        help="where the run folder goes (default: runs)")
    options, extra = parser.parse_known_args(argv)
    try:
        config = resolve_config(options.config)
    except ConfigNotFoundError as error:
        parser.error(str(error))
    cli = run_lightning_cli(
        ["fit", "--config", str(config), "--trainer.default_root_dir", options.root_dir, *extra]
    )
    trainer = cli.trainer
    checkpoint = trainer.checkpoint_callback
    last = getattr(checkpoint, "last_model_path", "") if checkpoint is not None else ""
    results = trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=last or None, verbose=False)
    metrics = results[0] if results else {}
    print()
    print(
        f"test PSNR: {metrics.get('test/psnr', float('nan')):.2f} dB   "
        f"SSIM: {metrics.get('test/ssim', float('nan')):.4f}   (checkpoint {last})"
    )
    print(f"look at it:  {sys.executable.rsplit('/', 1)[0]}/tensorboard --logdir {trainer.log_dir}")
    return 0


if __name__ == "__main__":
    flush_subnormals()  # before any thread starts, as the nerf-lightning script does
    sys.exit(main())
