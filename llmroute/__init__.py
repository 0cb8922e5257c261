"""llmroute: one OpenAI-shaped call over many inference platforms (public API re-exported here)."""
