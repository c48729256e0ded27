// WITCERT_HD marks functions shared by host code and CUDA kernels.
//
// Everything under kernels/meter/ is header-only, free of std:: calls that device code
// lacks, so the CPU reference and the CUDA kernels compile the very same arithmetic.
#pragma once

#if defined(__CUDACC__)
#define WITCERT_HD __host__ __device__
#else
#define WITCERT_HD
#endif
