"""Asynchronous data-parallel training (`AsyncParameterServer`): the update log, the
parameter shards that apply updates in its order, and the replica loop."""
