/*
 * quant-ref.h - the float64 CPU reference of the weight-quantized GEMM
 * (gemm_quant; kernels/templates/qgemv.cu, qgemm.cu): every weight
 * dequantised exactly (src/ops/quant.h's ktune__quant_dequant), then the
 * product in double precision.  For the tuner, whose buffers are float64
 * arrays (the packed words among them), and the tests.
 */
#ifndef KTUNE_QUANT_REF_H
#define KTUNE_QUANT_REF_H

#include "ops/quant.h"

/*
 * c[i * ldc + j] = sum over l < k of a[i * lda + l] * w(j, l) + (bias ?
 * bias[j] : 0), for i < m, j < s->n, with w the dequantised weight of the
 * packed words (their values as doubles, s->words of them), scales and
 * zeros as the format lays them out (zeros[0] for all when s->zero_scalar).
 * Rows of W are shared out over the cores.  Thread-safe.
 */
void ktune__ref_gemm_quant(const struct ktune_quant_shape *s, int64_t m, const double *a, int64_t lda,
			   const double *words, const double *scales, const double *zeros, const double *bias,
			   double *c, int64_t ldc);

#endif
