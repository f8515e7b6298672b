"""Model-parallel training (`Pipeline`) and graphs placed on workers (`run_placed`):
layers cut into stages, stage actors that exchange values worker to worker, and the
compression of what crosses between workers."""
