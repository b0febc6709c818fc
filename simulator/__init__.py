"""specdecsim simulator: pure Python (numpy, scipy, pydantic, simpy); never imports torch."""

__version__ = "0.1.0"
