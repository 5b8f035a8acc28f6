"""Inference engines behind the gateway: the `Engine` protocol and its implementations."""
