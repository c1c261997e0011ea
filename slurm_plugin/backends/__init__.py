"""Slurm backends behind one small interface (``base.SlurmBackend``)."""
