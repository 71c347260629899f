"""swarmdeck: durable LLM agent sessions and a dispatch CLI for planners."""

__version__ = "0.1.0"
