// AVX2 instantiation of the AES kernels (compiled with -mavx2).
#define KMPC_AES_ARCH avx2
#include "aes/kernel_impl.inc"
