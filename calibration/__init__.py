"""GPU side of specdecsim: microbenchmarks, profile building, live speculative runs.

Modules that need torch import it inside; importing this package does not import torch.
"""
