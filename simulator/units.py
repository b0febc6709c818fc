"""Unit constants. The simulation clock is microseconds (us); convert with these, never bare powers of ten."""

US_PER_MS = 1_000.0
US_PER_S = 1_000_000.0
MS_PER_S = 1_000.0
BYTES_PER_KB = 1_000
BYTES_PER_KIB = 1_024
BYTES_PER_MB = 1_000_000
BYTES_PER_GB = 1_000_000_000
BYTES_PER_GIB = 1 << 30
FLOPS_PER_TFLOP = 1e12

# GB/s -> bytes/us: 1 GB/s = 1e9 B / 1e6 us = 1e3 B/us.
BYTES_PER_US_PER_GB_PER_S = BYTES_PER_GB / US_PER_S
# TFLOP/s -> flops/us.
FLOPS_PER_US_PER_TFLOPS = FLOPS_PER_TFLOP / US_PER_S
