"""Generated kernels for fused groups of ops: NumPy (block by block), C for the CPU (compiled
by the system's C compiler) and CUDA (CuPy).

Read in this order: what the fusion pass hands over (`group`); the NumPy kernel (`numpy_fused`)
and what it runs on (`runtime`, `buffers`); one node as one line of C (`c_expr`), shared by the
C kernel (`c_fused`, built by `native`, the compiler's driver) and the CUDA one (`cuda_fused`).
"""
