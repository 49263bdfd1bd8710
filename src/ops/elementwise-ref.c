/*
 * elementwise-ref.c - float64 CPU references of the elementwise kernels.
 */
#include <math.h>

#include "ops/elementwise-ref.h"

#define GELU_TANH_K 0.79788456080286545 /* sqrt(2 / pi) */
#define GELU_TANH_C 0.044715

void ktune__ref_add(const double *x, const double *y, double *z, long n)
{
	for (long i = 0; i < n; i++)
		z[i] = x[i] + y[i];
}

static double gelu_erf(double x)
{
	return 0.5 * x * (1 + erf(x / sqrt(2)));
}

/* Phi(x) + x phi(x) */
static double gelu_erf_grad(double x)
{
	return 0.5 * (1 + erf(x / sqrt(2))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
}

static double gelu_tanh(double x)
{
	return 0.5 * x * (1 + tanh(GELU_TANH_K * (x + GELU_TANH_C * x * x * x)));
}

static double gelu_tanh_grad(double x)
{
	double t = tanh(GELU_TANH_K * (x + GELU_TANH_C * x * x * x));
	return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_TANH_K * (1 + 3 * GELU_TANH_C * x * x);
}

static double sigmoid(double x)
{
	return 1 / (1 + exp(-x));
}

static double act(double a, int kind)
{
	return kind == 0 ? a * sigmoid(a) : kind == 1 ? gelu_erf(a) : gelu_tanh(a);
}

static double act_grad(double a, int kind)
{
	if (kind == 0) {
		double s = sigmoid(a);
		return s * (1 + a * (1 - s));
	}
	return kind == 1 ? gelu_erf_grad(a) : gelu_tanh_grad(a);
}

void ktune__ref_gelu(const double *x, const double *dy, double *out, long n, int approx,
		     int backward)
{
	for (long i = 0; i < n; i++)
		if (backward)
			out[i] = dy[i] * (approx ? gelu_tanh_grad(x[i]) : gelu_erf_grad(x[i]));
		else
			out[i] = approx ? gelu_tanh(x[i]) : gelu_erf(x[i]);
}

void ktune__ref_glu(const double *a, const double *b, const double *dout, double *out_a,
		    double *out_b, long n, int act_kind, int backward)
{
	for (long i = 0; i < n; i++) {
		double x = a[i], y = b[i];
		if (backward) {
			double d = dout[i];
			out_a[i] = d * y * act_grad(x, act_kind);
			out_b[i] = d * act(x, act_kind);
		} else {
			out_a[i] = act(x, act_kind) * y;
		}
	}
}

/* The high and low words of the 64-bit product a * b. */
static void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
	uint64_t p = (uint64_t)a * b;
	*hi = (uint32_t)(p >> 32);
	*lo = (uint32_t)p;
}

void ktune__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
	for (int round = 0; round < 10; round++) {
		uint32_t hi0, lo0, hi1, lo1;
		mulhilo(0xD2511F53u, c0, &hi0, &lo0);
		mulhilo(0xCD9E8D57u, c2, &hi1, &lo1);
		c0 = hi1 ^ c1 ^ k0;
		c1 = lo1;
		c2 = hi0 ^ c3 ^ k1;
		c3 = lo0;
		k0 += 0x9E3779B9u;
		k1 += 0xBB67AE85u;
	}
	out[0] = c0;
	out[1] = c1;
	out[2] = c2;
	out[3] = c3;
}

int ktune__ref_dropout_keep(uint64_t seed, uint64_t offset, int64_t i, double p)
{
	uint64_t counter = offset + (uint64_t)i / 4;
	uint32_t ctr[4] = { (uint32_t)counter, (uint32_t)(counter >> 32), 0, 0 };
	uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) }, r[4];
	ktune__philox4x32_10(ctr, key, r);
	return ldexp(r[i % 4], -32) >= p; /* exact: a 32-bit word fits a double */
}

void ktune__ref_dropout(const double *x, double *y, long n, double p, uint64_t seed,
			uint64_t offset)
{
	for (long i = 0; i < n; i++)
		y[i] = ktune__ref_dropout_keep(seed, offset, i, p) ? x[i] / (1 - p) : 0;
}
