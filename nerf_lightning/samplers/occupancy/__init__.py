"""The ``OccupancyGrid`` sampler and its machinery: the grid of occupied cells (one or several
levels), marching rays through it, early ray termination and exploration of unseen cells."""
