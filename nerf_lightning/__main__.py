from nerf_lightning.cli import console_main

console_main()
