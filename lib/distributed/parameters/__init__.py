"""Parameters held by parameter-server shards: variables cut into row blocks, the
client's model as the master copy, the shards' deployment on workers, and sharded
embedding tables."""
