// AVX-512 instantiation of the AES kernels (compiled with -mavx512f/bw/vl).
#define KMPC_AES_ARCH avx512
#define KMPC_AES_VEC_BYTES 64
#include "aes/kernel_impl.inc"
