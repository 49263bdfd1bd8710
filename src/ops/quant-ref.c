/*
 * quant-ref.c - the float64 reference of the weight-quantized GEMM
 * (quant-ref.h).
 */
#include <stdlib.h>

#include "ops/quant-ref.h"

struct job {
	const struct ktune_quant_shape *s;
	int64_t m, lda, ldc;
	const double *a, *words, *scales, *zeros, *bias;
	double *c;
	int njobs;
};

/* Rows j of W with j % njobs == i: each dequantised once into a row of float64, then every row of a. */
static void rows(int i, void *arg)
{
	const struct job *jb = arg;
	const struct ktune_quant_shape *s = jb->s;
	double *w = malloc((size_t)s->k * sizeof(double));
	if (!w)
		abort(); /* a test's or the tuner's host: nothing sensible to return */
	for (int64_t j = i; j < s->n; j += jb->njobs) {
		const double *row = jb->words + j * s->row_words;
		for (int64_t l = 0; l < s->k; l++) {
			uint32_t word = (uint32_t)row[l / s->per_word];
			unsigned q = (word >> (l % s->per_word * s->bits)) & ((1u << s->bits) - 1u);
			int64_t g = j * s->groups + l / s->group;
			double scale = s->has_scale ? jb->scales[g] : 1;
			double zero = !s->has_zero ? 0 : jb->zeros[s->zero_scalar ? 0 : g];
			w[l] = ktune__quant_dequant(s->mode, q, scale, zero);
		}
		for (int64_t r = 0; r < jb->m; r++) {
			const double *x = jb->a + r * jb->lda;
			double sum = 0;
			for (int64_t l = 0; l < s->k; l++)
				sum += x[l] * w[l];
			jb->c[r * jb->ldc + j] = sum + (jb->bias ? jb->bias[j] : 0);
		}
	}
	free(w);
}

void ktune__ref_gemm_quant(const struct ktune_quant_shape *s, int64_t m, const double *a, int64_t lda,
			   const double *words, const double *scales, const double *zeros, const double *bias,
			   double *c, int64_t ldc)
{
	struct job jb = { s, m, lda, ldc, a, words, scales, zeros, bias, c, 0 };
	jb.njobs = s->n < 256 ? (int)s->n : 256;
	ktune__parallel_for(jb.njobs, 0, rows, &jb);
}
