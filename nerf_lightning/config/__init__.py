"""Layer ``config``: finding configs and explaining config mistakes: shipped config names
(``--config demo``) resolved to files (the YAML files themselves are the package ``nerf_lightning.
configs``), and constructor errors turned into one line naming the config key.

May import ``core`` only.
"""
