"""Files written atomically and HDF5 files read without trusting them."""

__all__ = []
