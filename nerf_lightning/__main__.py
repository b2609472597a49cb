import sys

from nerf_lightning.cli import main

sys.exit(main())
