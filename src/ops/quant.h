/*
 * quant.h - ktune's format of weight-quantized matrices (docs/quant.md), on
 * the host: sizes and checks, round-to-nearest quantisation, packing into
 * 32-bit words and back, and the dequantised value of one weight.  The
 * public ktune_quant_sizes, ktune_quant_pack and ktune_quant_unpack are
 * built on these; the op gemm_quant (gemm_quant.c), its float64 reference
 * (quant-ref.c) and the kernels (kernels/templates/quant.cuh) read the same
 * layout.
 *
 * Layout, version 1 ("v1" in the op's key): a weight W[N, K] of b-bit
 * unsigned integers q (0 <= q < 2^b), E = 32 / b of them per word, element
 * k of row n in word n * RW + k / E at bits (k % E) * b .. + b - 1 (the
 * first element in the lowest bits); RW, the words of a row, is K / E
 * rounded up to a multiple of 4, so that every row starts 16-byte aligned
 * (the padding words are zero, and nobody reads them).  Scales and zeros
 * are [N, K / G] (one group: [N, 1] per channel), row n's groups in K
 * order; a scalar zero is one value.  Scales and zeros have the
 * activations' dtype.
 */
#ifndef KTUNE_QUANT_H
#define KTUNE_QUANT_H

#include <stdint.h>

#include "common.h"

/* The packing's version: a part of the op's key, and of the files 'ktune pack' writes. */
#define KTUNE_QUANT_PACK_VERSION 1

/* Every K is a multiple of this: 32 one-bit weights fill one word (and every group size is one). */
#define KTUNE_QUANT_K_MULTIPLE 32

/* A checked format with its derived sizes. */
struct ktune_quant_shape {
	int bits;          /* 8, 4, 2, 1 */
	int per_word;      /* E = 32 / bits */
	int64_t group;     /* G: 32, 64, 128, or K per channel */
	int channel;       /* 1: one group per row */
	ktune_quant_mode mode;
	int zero_scalar;   /* 1: one zero (modes with a zero) */
	int has_scale, has_zero;
	int64_t n, k;
	int64_t row_words; /* RW */
	int64_t groups;    /* K / G */
	int64_t words, scales, zeros; /* element counts of the three arrays (0: not used by the mode) */
};

/*
 * Checks a format for an [n, k] weight (bits 8, 4, 2 or 1; group 32, 64,
 * 128 or 0 per channel; a known mode; n, k >= 1; k a multiple of 32 and of
 * the group) and fills s.  KTUNE_ERR_INVALID with the reason otherwise.
 */
int ktune__quant_shape(const ktune_quant_format *fmt, int64_t n, int64_t k, struct ktune_quant_shape *s,
		       struct ktune_err *e);

/* The variant parts of the op's key for a format: "4", "128" or "chan", "scale_shift". */
const char *ktune__quant_bits_name(int bits);
const char *ktune__quant_group_name(int group_size);
const char *ktune__quant_mode_name(ktune_quant_mode mode);

/* The dequantised weight of integer q with its group's scale and zero, in float64. */
static inline double ktune__quant_dequant(ktune_quant_mode mode, double q, double scale, double zero)
{
	switch (mode) {
	case KTUNE_QUANT_SCALE_SHIFT:
		return (q - zero) * scale;
	case KTUNE_QUANT_SCALE:
		return q * scale;
	case KTUNE_QUANT_SHIFT:
		return q - zero;
	case KTUNE_QUANT_FMA:
		return q * scale + zero;
	}
	return 0;
}

/* Integer q of element (row, col) of packed words. */
static inline unsigned ktune__quant_get(const struct ktune_quant_shape *s, const uint32_t *words, int64_t row,
					int64_t col)
{
	uint32_t w = words[row * s->row_words + col / s->per_word];
	return (w >> (col % s->per_word * s->bits)) & ((1u << s->bits) - 1u);
}

/* Packs q[n * k] (row-major, each < 2^bits) into words[s->words], padding zero. */
void ktune__quant_pack_q(const struct ktune_quant_shape *s, const uint8_t *q, uint32_t *words);
/* Unpacks words into q[n * k]. */
void ktune__quant_unpack_q(const struct ktune_quant_shape *s, const uint32_t *words, uint8_t *q);

/*
 * Round-to-nearest quantisation of w[n, k] (float64 values, row stride ldw)
 * into q, with scales and zeros as float64 already rounded to dtype (the
 * values the kernels will read).  docs/quant.md says how each mode picks
 * them.
 */
void ktune__quant_quantize(const struct ktune_quant_shape *s, const double *w, int64_t ldw, ktune_dtype dtype,
			   uint8_t *q, double *scales, double *zeros);

/* f16 or bf16 bit patterns and float64: v rounded to nearest even; the value an element holds. */
uint16_t ktune__quant_to_elem(double v, ktune_dtype dtype);
double ktune__quant_from_elem(uint16_t x, ktune_dtype dtype);

#endif
