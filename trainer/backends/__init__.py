"""Training backends: the `Backend` protocol and its implementations (torch on CPU)."""
