"""Synchronous data-parallel training (`DataParallel`): epoch plans, the step log,
the parameter shards that apply each step once, and the replica loop."""
