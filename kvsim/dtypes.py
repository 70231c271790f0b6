"""Number formats and their sizes."""

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp4": 0.5,
    # OCP Microscaling (MX) v1.0: blocks of 32 FP4 (E2M1) elements share one 8-bit E8M0 scale,
    # so 4 + 8/32 = 4.25 bits per element
    "mxfp4": 4.25 / 8,
}
"""Bytes per element of each supported number format."""
