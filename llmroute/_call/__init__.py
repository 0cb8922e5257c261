"""The call core: one call from `create()`'s arguments to a settled attempt record. Sans-I/O but for the
shells' helpers (`offload`); private: the public face is `llmroute.client`."""
