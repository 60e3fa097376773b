"""Generated kernels for fused groups of ops: NumPy (block by block), C for the CPU (compiled
by the system's C compiler) and CUDA (CuPy).

As in tinygrad, the code that *writes* a kernel (a renderer) is apart from the code that chooses
it, compiles it and calls it (a runtime). Read in this order: what the fusion pass hands over
(`group`); the NumPy kernel written (`numpy_renderer`, with `buffers`) and run
(`numpy_runtime`); one node as one line of C (`c_expr`), shared by the C kernel and the CUDA one;
the C kernel's loops (`c_loops`) and the rest of its source (`c_renderer`); the system's C
compiler, driven from Python (`native`); the C kernel chosen and called (`c_runtime`); the CUDA
kernel, written and handed to CuPy (`cuda_fused`).
"""
