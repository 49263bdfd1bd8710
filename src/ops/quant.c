/*
 * quant.c - ktune's format of weight-quantized matrices on the host
 * (quant.h): checks and sizes, round-to-nearest quantisation, packing, and
 * the public ktune_quant_sizes, ktune_quant_pack and ktune_quant_unpack.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/quant.h"

/* ------------------------------------------------------------ elements */

/*
 * v rounded to nearest even in a binary format of `digits` significand
 * bits whose normal numbers start at 2^emin, and overflowing to infinity
 * past `max`: one rounding from float64 (converting through float would
 * round twice).
 */
static double round_to(double v, int digits, int emin, double max)
{
	double a = fabs(v);
	int ex;
	if (a == 0 || isnan(v) || isinf(v))
		return v;
	frexp(a, &ex); /* a = f * 2^ex, 0.5 <= f < 1: its leading bit is 2^(ex - 1) */
	int e = ex - 1 < emin ? emin : ex - 1;
	double quantum = ldexp(1.0, e - (digits - 1));
	double r = nearbyint(a / quantum) * quantum;
	if (r > max)
		r = INFINITY;
	return v < 0 ? -r : r;
}

uint16_t ktune__quant_to_elem(double v, ktune_dtype dtype)
{
	if (dtype == KTUNE_BF16) {
		if (isnan(v))
			return 0x7fc0;
		float f = (float)round_to(v, 8, -126, 0x1.fep127); /* exact in float */
		uint32_t u;
		memcpy(&u, &f, sizeof(u));
		return (uint16_t)(u >> 16);
	}
	if (isnan(v))
		return 0x7e00;
	double r = round_to(v, 11, -14, 65504.0), a = fabs(r);
	uint16_t sign = r < 0 || (r == 0 && signbit(r)) ? 0x8000 : 0;
	if (isinf(r))
		return sign | 0x7c00;
	if (a < ldexp(1.0, -14)) /* subnormal (or zero): multiples of 2^-24 */
		return sign | (uint16_t)(a * ldexp(1.0, 24));
	int ex;
	frexp(a, &ex);
	int e = ex - 1;
	return sign | (uint16_t)((e + 15) << 10) | (uint16_t)(a * ldexp(1.0, 10 - e) - 1024);
}

double ktune__quant_from_elem(uint16_t x, ktune_dtype dtype)
{
	if (dtype == KTUNE_BF16) {
		uint32_t u = (uint32_t)x << 16;
		float f;
		memcpy(&f, &u, sizeof(f));
		return f;
	}
	int sign = x >> 15, exp = (x >> 10) & 31, man = x & 1023;
	double v = exp == 0 ? ldexp(man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexp(man + 1024, exp - 25);
	return sign ? -v : v;
}

/* ------------------------------------------------------------ the format */

const char *ktune__quant_bits_name(int bits)
{
	return bits == 8 ? "8" : bits == 4 ? "4" : bits == 2 ? "2" : bits == 1 ? "1" : NULL;
}

const char *ktune__quant_group_name(int group_size)
{
	return group_size == 32 ? "32" : group_size == 64 ? "64" : group_size == 128 ? "128"
	       : group_size == 0 ? "chan" : NULL;
}

const char *ktune__quant_mode_name(ktune_quant_mode mode)
{
	switch (mode) {
	case KTUNE_QUANT_SCALE_SHIFT:
		return "scale_shift";
	case KTUNE_QUANT_SCALE:
		return "scale";
	case KTUNE_QUANT_SHIFT:
		return "shift";
	case KTUNE_QUANT_FMA:
		return "fma";
	}
	return NULL;
}

int ktune__quant_shape(const ktune_quant_format *fmt, int64_t n, int64_t k, struct ktune_quant_shape *s,
		       struct ktune_err *e)
{
	memset(s, 0, sizeof(*s));
	if (!fmt)
		return ktune__fail(e, KTUNE_ERR_INVALID, "quant: the format is NULL");
	if (!ktune__quant_bits_name(fmt->bits))
		return ktune__fail(e, KTUNE_ERR_INVALID, "quant: bits %d is not one of 8, 4, 2, 1", fmt->bits);
	if (!ktune__quant_group_name(fmt->group_size))
		return ktune__fail(e, KTUNE_ERR_INVALID,
				   "quant: group size %d is not one of 32, 64, 128 or 0 (per channel)", fmt->group_size);
	if (!ktune__quant_mode_name(fmt->mode))
		return ktune__fail(e, KTUNE_ERR_INVALID, "quant: mode %d is not a ktune_quant_mode", (int)fmt->mode);
	if (fmt->zero_scalar != 0 && fmt->zero_scalar != 1)
		return ktune__fail(e, KTUNE_ERR_INVALID, "quant: zero_scalar is %d, not 0 or 1", fmt->zero_scalar);
	if (n < 1 || k < 1 || n > (INT64_C(1) << 34) || k > (INT64_C(1) << 34))
		return ktune__fail(e, KTUNE_ERR_INVALID, "quant: [n, k] = [%lld, %lld] is not in 1..2^34",
				   (long long)n, (long long)k);
	if (k % KTUNE_QUANT_K_MULTIPLE)
		return ktune__fail(e, KTUNE_ERR_INVALID,
				   "quant: k = %lld is not a multiple of %d (32 one-bit weights fill a word; "
				   "ktune takes the same k for every format)", (long long)k, KTUNE_QUANT_K_MULTIPLE);
	if (fmt->group_size && k % fmt->group_size)
		return ktune__fail(e, KTUNE_ERR_INVALID, "quant: k = %lld is not a multiple of the group size %d",
				   (long long)k, fmt->group_size);
	s->bits = fmt->bits;
	s->per_word = 32 / fmt->bits;
	s->channel = fmt->group_size == 0;
	s->group = s->channel ? k : fmt->group_size;
	s->mode = fmt->mode;
	s->has_scale = fmt->mode != KTUNE_QUANT_SHIFT;
	s->has_zero = fmt->mode != KTUNE_QUANT_SCALE;
	s->zero_scalar = s->has_zero && fmt->zero_scalar;
	s->n = n;
	s->k = k;
	s->row_words = (k / s->per_word + 3) / 4 * 4;
	s->groups = k / s->group;
	if (s->row_words > INT64_MAX / n)
		return ktune__fail(e, KTUNE_ERR_INVALID, "quant: [%lld, %lld] is too large", (long long)n, (long long)k);
	s->words = n * s->row_words;
	s->scales = s->has_scale ? n * s->groups : 0;
	s->zeros = !s->has_zero ? 0 : s->zero_scalar ? 1 : n * s->groups;
	return KTUNE_OK;
}

void ktune__quant_pack_q(const struct ktune_quant_shape *s, const uint8_t *q, uint32_t *words)
{
	memset(words, 0, (size_t)s->words * sizeof(*words));
	for (int64_t r = 0; r < s->n; r++)
		for (int64_t c = 0; c < s->k; c++)
			words[r * s->row_words + c / s->per_word] |= (uint32_t)q[r * s->k + c]
								      << (c % s->per_word * s->bits);
}

void ktune__quant_unpack_q(const struct ktune_quant_shape *s, const uint32_t *words, uint8_t *q)
{
	for (int64_t r = 0; r < s->n; r++)
		for (int64_t c = 0; c < s->k; c++)
			q[r * s->k + c] = (uint8_t)ktune__quant_get(s, words, r, c);
}

/* ------------------------------------------------------------ quantisation */

static double clamp_round(double x, double top)
{
	double q = round(x); /* ties away from zero */
	return q < 0 ? 0 : q > top ? top : q;
}

/* A scale of 0 (a constant group) would divide by zero: any positive scale holds it. */
static double rounded_scale(double v, ktune_dtype dtype)
{
	double s = ktune__quant_from_elem(ktune__quant_to_elem(v, dtype), dtype);
	return s == 0 || !isfinite(s) ? 1.0 : s;
}

static double rounded(double v, ktune_dtype dtype)
{
	return ktune__quant_from_elem(ktune__quant_to_elem(v, dtype), dtype);
}

void ktune__quant_quantize(const struct ktune_quant_shape *s, const double *w, int64_t ldw, ktune_dtype dtype,
			   uint8_t *q, double *scales, double *zeros)
{
	const double top = (double)((1 << s->bits) - 1);
	double all_min = INFINITY, all_max_abs = 0;

	for (int64_t r = 0; r < s->n; r++)
		for (int64_t c = 0; c < s->k; c++) {
			double v = w[r * ldw + c];
			all_min = v < all_min ? v : all_min;
			all_max_abs = fabs(v) > all_max_abs ? fabs(v) : all_max_abs;
		}
	/* the scalar zero, where the mode has one: the grid every group shares */
	double zero = 0;
	if (s->zero_scalar) {
		if (s->mode == KTUNE_QUANT_SCALE_SHIFT)
			zero = top / 2; /* symmetric around the middle code: exact in f16 and bf16 */
		else if (s->mode == KTUNE_QUANT_SHIFT)
			zero = rounded(-all_min, dtype);
		else /* fma: the matrix's least weight, every group's grid starting there */
			zero = rounded(all_min, dtype);
		zeros[0] = zero;
	}
	for (int64_t r = 0; r < s->n; r++)
		for (int64_t g = 0; g < s->groups; g++) {
			const double *x = w + r * ldw + g * s->group;
			uint8_t *out = q + r * s->k + g * s->group;
			double lo = INFINITY, hi = -INFINITY, scale = 1, z = zero;
			for (int64_t i = 0; i < s->group; i++) {
				lo = x[i] < lo ? x[i] : lo;
				hi = x[i] > hi ? x[i] : hi;
			}
			switch (s->mode) {
			case KTUNE_QUANT_SCALE_SHIFT:
				if (s->zero_scalar) {
					double m = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
					scale = rounded_scale(m / zero, dtype);
				} else {
					scale = rounded_scale((hi - lo) / top, dtype);
					z = rounded(-lo / scale, dtype);
				}
				for (int64_t i = 0; i < s->group; i++)
					out[i] = (uint8_t)clamp_round(x[i] / scale + z, top);
				break;
			case KTUNE_QUANT_SCALE: {
				/* unsigned codes hold one sign: the extreme of the larger magnitude sets it */
				double m = fabs(lo) > fabs(hi) ? lo : hi;
				scale = rounded_scale(m / top, dtype);
				for (int64_t i = 0; i < s->group; i++)
					out[i] = (uint8_t)clamp_round(x[i] / scale, top);
				break;
			}
			case KTUNE_QUANT_SHIFT:
				if (!s->zero_scalar)
					z = rounded(-lo, dtype);
				for (int64_t i = 0; i < s->group; i++)
					out[i] = (uint8_t)clamp_round(x[i] + z, top);
				break;
			case KTUNE_QUANT_FMA:
				if (!s->zero_scalar)
					z = rounded(lo, dtype);
				scale = rounded_scale((hi - z) / top, dtype);
				for (int64_t i = 0; i < s->group; i++)
					out[i] = (uint8_t)clamp_round((x[i] - z) / scale, top);
				break;
			}
			if (s->has_scale)
				scales[r * s->groups + g] = scale;
			if (s->has_zero && !s->zero_scalar)
				zeros[r * s->groups + g] = z;
		}
}

/* ------------------------------------------------------------ the public API */

ktune_status ktune_quant_sizes(const ktune_quant_format *fmt, int64_t n, int64_t k, int64_t *words,
			       int64_t *scales, int64_t *zeros, char *errbuf, size_t errlen)
{
	struct ktune_quant_shape s;
	struct ktune_err e;
	int rc = ktune__quant_shape(fmt, n, k, &s, &e);
	if (rc) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "%s", e.msg);
		return rc;
	}
	if (errbuf && errlen)
		errbuf[0] = '\0';
	if (words)
		*words = s.words;
	if (scales)
		*scales = s.scales;
	if (zeros)
		*zeros = s.zeros;
	return KTUNE_OK;
}

static int elem_dtype(ktune_dtype d)
{
	return d == KTUNE_F16 || d == KTUNE_BF16;
}

ktune_status ktune_quant_pack(const ktune_quant_format *fmt, int64_t n, int64_t k, const void *w, int64_t ldw,
			      ktune_dtype dtype, uint32_t *wq, void *scales, void *zeros)
{
	struct ktune_quant_shape s;
	int rc;
	if ((rc = ktune__quant_shape(fmt, n, k, &s, NULL)))
		return rc;
	if (!elem_dtype(dtype) || !w || ldw < k || !wq || (s.scales && !scales) || (s.zeros && !zeros))
		return KTUNE_ERR_INVALID;
	if ((uint64_t)n * (uint64_t)k > SIZE_MAX / sizeof(double))
		return KTUNE_ERR_NOMEM;
	double *x = malloc((size_t)(n * k) * sizeof(double));
	double *sc = malloc((size_t)(s.scales ? s.scales : 1) * sizeof(double));
	double *zr = malloc((size_t)(s.zeros ? s.zeros : 1) * sizeof(double));
	uint8_t *q = malloc((size_t)(n * k));
	rc = KTUNE_ERR_NOMEM;
	if (!x || !sc || !zr || !q)
		goto out;
	for (int64_t r = 0; r < n; r++)
		for (int64_t c = 0; c < k; c++) {
			double v = ktune__quant_from_elem(((const uint16_t *)w)[r * ldw + c], dtype);
			if (!isfinite(v)) {
				rc = KTUNE_ERR_INVALID; /* no grid holds a NaN or an infinity */
				goto out;
			}
			x[r * k + c] = v;
		}
	ktune__quant_quantize(&s, x, k, dtype, q, sc, zr);
	ktune__quant_pack_q(&s, q, wq);
	for (int64_t i = 0; i < s.scales; i++)
		((uint16_t *)scales)[i] = ktune__quant_to_elem(sc[i], dtype);
	for (int64_t i = 0; i < s.zeros; i++)
		((uint16_t *)zeros)[i] = ktune__quant_to_elem(zr[i], dtype);
	rc = KTUNE_OK;
out:
	free(x);
	free(sc);
	free(zr);
	free(q);
	return rc;
}

ktune_status ktune_quant_unpack(const ktune_quant_format *fmt, int64_t n, int64_t k, const uint32_t *wq,
				const void *scales, const void *zeros, ktune_dtype dtype, void *w, int64_t ldw)
{
	struct ktune_quant_shape s;
	int rc;
	if ((rc = ktune__quant_shape(fmt, n, k, &s, NULL)))
		return rc;
	if (!elem_dtype(dtype) || !w || ldw < k || !wq || (s.scales && !scales) || (s.zeros && !zeros))
		return KTUNE_ERR_INVALID;
	const uint16_t *sc = scales, *zr = zeros;
	for (int64_t r = 0; r < n; r++)
		for (int64_t c = 0; c < k; c++) {
			int64_t g = r * s.groups + c / s.group;
			double scale = s.has_scale ? ktune__quant_from_elem(sc[g], dtype) : 1;
			double zero = !s.has_zero ? 0 : ktune__quant_from_elem(zr[s.zero_scalar ? 0 : g], dtype);
			double v = ktune__quant_dequant(s.mode, ktune__quant_get(&s, wq, r, c), scale, zero);
			((uint16_t *)w)[r * ldw + c] = ktune__quant_to_elem(v, dtype);
		}
	return KTUNE_OK;
}
