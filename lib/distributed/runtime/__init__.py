"""What every strategy runs on: the cluster, Dask tasks and actors with bounded waits,
actors called in process, telling a lost worker from other failures, simulated slow
workers."""
