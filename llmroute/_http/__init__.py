"""HTTP: the request value, the transports (the only network I/O), SSE decoding, read caps and per-attempt
timeouts. Private: adapters and the call core use it."""
