"""Generated kernels for fused groups of ops: NumPy (block by block) and CUDA (CuPy)."""
