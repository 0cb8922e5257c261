"""Process plumbing under every layer: secrets and their scrubbing, fork safety, a client's life cycle,
telemetry, percentiles, JSON Lines reading. Private; imports nothing of llmroute but `errors`."""
