/*
 * test-rowwise-ref.c - the float64 references of the row-wise family
 * (src/ops/rowwise-ref.c) against hand-computed values: softmax and its
 * gradient, RMSNorm with and without the residual, LayerNorm (a row with a
 * large offset: the two-pass variance loses nothing; a row of one value:
 * rstd = 1 / sqrt(eps), y = b; row strides past cols left untouched) and its
 * gradient, which also matches central finite differences of the forward.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "ops/rowwise-ref.h"

static void assert_close(double got, double want, double tol, const char *what, int i)
{
	if (!(fabs(got - want) <= tol))
		fail_msg("%s[%d]: %.17g, want %.17g (tolerance %g)", what, i, got, want, tol);
}

static void test_rowwise_ref__softmax(void **state)
{
	double x[6] = { 0, log(2), log(5), -INFINITY, -INFINITY, -INFINITY }, y[6];
	double want[6] = { 0.125, 0.25, 0.625, 0, 0, 0 };
	(void)state;
	ktune__ref_softmax(x, 3, y, 3, 2, 3);
	for (int i = 0; i < 6; i++)
		assert_close(y[i], want[i], 1e-15, "softmax", i);
	/* dx = y (dy - sum y dy): sum = 2.5 */
	double yb[2] = { 0.25, 0.75 }, dy[2] = { 1, 3 }, dx[2];
	ktune__ref_softmax_backward(yb, 2, dy, 2, dx, 2, 1, 2);
	assert_close(dx[0], -0.375, 1e-15, "softmax dx", 0);
	assert_close(dx[1], 0.375, 1e-15, "softmax dx", 1);
}

static void test_rowwise_ref__rmsnorm(void **state)
{
	/* h = [3, 4]: mean(h^2) = 12.5, rstd = 1 / sqrt(12.5) */
	double x[2] = { 3, 4 }, xr[2] = { 1, 1 }, res[2] = { 2, 3 }, w[2] = { 1, 2 }, y[2], h[2], rstd;
	const double k = 0.28284271247461906;
	(void)state;
	ktune__ref_rmsnorm(x, 2, NULL, 0, w, 0, y, 2, &rstd, NULL, 0, 1, 2);
	assert_close(rstd, k, 1e-16, "rmsnorm rstd", 0);
	assert_close(y[0], 3 * k, 1e-15, "rmsnorm y", 0);
	assert_close(y[1], 8 * k, 1e-15, "rmsnorm y", 1);
	ktune__ref_rmsnorm(xr, 2, res, 2, w, 0, y, 2, &rstd, h, 2, 1, 2);
	assert_true(h[0] == 3 && h[1] == 4);
	assert_close(y[1], 8 * k, 1e-15, "rmsnorm residual y", 1);
	/* backward, rstd = 1: s = sum dy w h = 1*1*3 + 1*2*4 = 11; dx = dy w - h * 11 / 2 */
	double dy[2] = { 1, 1 }, one = 1, dx[2], dw[2];
	ktune__ref_rmsnorm_backward(x, 2, w, &one, dy, 2, dx, 2, dw, 1, 2);
	assert_close(dx[0], 1 - 3 * 5.5, 1e-15, "rmsnorm dx", 0);
	assert_close(dx[1], 2 - 4 * 5.5, 1e-15, "rmsnorm dx", 1);
	assert_true(dw[0] == 3 && dw[1] == 4);
}

static void test_rowwise_ref__layernorm(void **state)
{
	enum { LD = 5 };
	/* [1, 2, 3, 4]: mean 2.5, variance 1.25; the same 1e8 higher; a row of 3s; the fifth column is padding */
	double x[3 * LD] = { 1, 2, 3, 4, 99, 1e8 + 1, 1e8 + 2, 1e8 + 3, 1e8 + 4, 99, 3, 3, 3, 3, 99 };
	double w[4] = { 1, 2, 0.5, -1 }, b[4] = { 0, 1, -1, 0.5 }, y[3 * LD], mean[3], rstd[3];
	const double k = 0.89442719099991586; /* 1 / sqrt(1.25) */
	const double want[4] = { -1.5 * k, 1 - k, -1 + 0.25 * k, 0.5 - 1.5 * k };
	(void)state;
	for (int i = 0; i < 3 * LD; i++)
		y[i] = -7;
	ktune__ref_layernorm(x, LD, w, b, 1e-5, y, LD, mean, rstd, 3, 4);
	assert_close(mean[0], 2.5, 0, "layernorm mean", 0);
	assert_close(rstd[0], 1 / sqrt(1.25 + 1e-5), 1e-15, "layernorm rstd", 0);
	for (int c = 0; c < 4; c++)
		assert_close(y[c], (x[c] - 2.5) / sqrt(1.25 + 1e-5) * w[c] + b[c], 1e-15, "layernorm y", c);
	/* the offset row: the same variance (two passes: no E[x^2] - mean^2 cancellation) */
	assert_close(mean[1], 1e8 + 2.5, 0, "layernorm mean", 1);
	assert_close(rstd[1], rstd[0], 0, "layernorm rstd", 1);
	for (int c = 0; c < 4; c++)
		assert_close(y[LD + c], y[c], 0, "layernorm offset y", c);
	/* the constant row: variance 0, rstd = 1 / sqrt(eps), y = b */
	assert_close(mean[2], 3, 0, "layernorm mean", 2);
	assert_close(rstd[2], 1 / sqrt(1e-5), 1e-12, "layernorm rstd", 2);
	for (int c = 0; c < 4; c++)
		assert_close(y[2 * LD + c], b[c], 0, "layernorm constant y", c);
	for (int r = 0; r < 3; r++)
		assert_true(y[r * LD + 4] == -7); /* past cols: untouched */

	/* eps 0: y by hand */
	ktune__ref_layernorm(x, LD, w, b, 0, y, LD, mean, rstd, 1, 4);
	assert_close(rstd[0], k, 1e-15, "layernorm rstd eps 0", 0);
	for (int c = 0; c < 4; c++)
		assert_close(y[c], want[c], 1e-15, "layernorm y eps 0", c);
}

static void test_rowwise_ref__layernorm_backward(void **state)
{
	/*
	 * x = [1, 2, 3, 4] twice with mean 2.5 and rstd 2: xhat = [-3, -1, 1, 3].
	 * w = [1, 2, 1, 1].  Row 0: dy = [1, 1, 0, -1], g = [1, 2, 0, -1],
	 * mean(g) = 0.5, mean(g xhat) = -2: dx = 2 (g - 0.5 + 2 xhat).  Row 1:
	 * dy = [2, 0, 1, 1], g = [2, 0, 1, 1], mean(g) = 1, mean(g xhat) = -0.5.
	 */
	double x[8] = { 1, 2, 3, 4, 1, 2, 3, 4 }, w[4] = { 1, 2, 1, 1 }, mean[2] = { 2.5, 2.5 }, rstd[2] = { 2, 2 };
	double dy[8] = { 1, 1, 0, -1, 2, 0, 1, 1 }, dx[8], dw[4], db[4];
	const double want_dx[8] = { -11, -1, 3, 9, -1, -3, 1, 3 };
	const double want_dw[4] = { -9, -1, 1, 0 }, want_db[4] = { 3, 1, 1, 0 };
	(void)state;
	ktune__ref_layernorm_backward(x, 4, w, mean, rstd, dy, 4, dx, 4, dw, db, 2, 4);
	for (int i = 0; i < 8; i++)
		assert_close(dx[i], want_dx[i], 1e-14, "layernorm dx", i);
	for (int c = 0; c < 4; c++) {
		assert_close(dw[c], want_dw[c], 1e-14, "layernorm dw", c);
		assert_close(db[c], want_db[c], 1e-14, "layernorm db", c);
	}
}

/* L = sum dy * y(x, w, b): the backward's dx, dw, db against central differences of the forward. */
static double loss(const double *x, const double *w, const double *b, const double *dy, int rows, int cols)
{
	double y[3 * 7], mean[3], rstd[3], s = 0;
	ktune__ref_layernorm(x, cols, w, b, 1e-3, y, cols, mean, rstd, rows, cols);
	for (int i = 0; i < rows * cols; i++)
		s += dy[i] * y[i];
	return s;
}

static void test_rowwise_ref__layernorm_backward_finite_differences(void **state)
{
	enum { ROWS = 3, COLS = 7 };
	double x[ROWS * COLS], dy[ROWS * COLS], w[COLS], b[COLS], y[ROWS * COLS], mean[ROWS], rstd[ROWS];
	double dx[ROWS * COLS], dw[COLS], db[COLS];
	const double h = 1e-6;
	(void)state;
	for (int i = 0; i < ROWS * COLS; i++) {
		x[i] = (double)((i * 37) % 23) / 5 - 2;
		dy[i] = (double)((i * 11) % 13) / 6 - 1;
	}
	for (int c = 0; c < COLS; c++) {
		w[c] = 0.5 + (double)c / 7;
		b[c] = (double)c / 3 - 1;
	}
	ktune__ref_layernorm(x, COLS, w, b, 1e-3, y, COLS, mean, rstd, ROWS, COLS);
	ktune__ref_layernorm_backward(x, COLS, w, mean, rstd, dy, COLS, dx, COLS, dw, db, ROWS, COLS);
	double *vars[3] = { x, w, b }, *grads[3] = { dx, dw, db };
	const int counts[3] = { ROWS * COLS, COLS, COLS };
	const char *names[3] = { "dx", "dw", "db" };
	for (int v = 0; v < 3; v++)
		for (int i = 0; i < counts[v]; i++) {
			double keep = vars[v][i];
			vars[v][i] = keep + h;
			double up = loss(x, w, b, dy, ROWS, COLS);
			vars[v][i] = keep - h;
			double down = loss(x, w, b, dy, ROWS, COLS);
			vars[v][i] = keep;
			assert_close(grads[v][i], (up - down) / (2 * h), 1e-6, names[v], i);
		}
}

/* ------------------------------------------------------------ cross-entropy */

static void test_rowwise_ref__cross_entropy(void **state)
{
	/*
	 * Row 0: x = [0, ln 2, ln 5], sum exp = 8, t = 2: loss = ln 8 - ln 5.
	 * Row 1: the same, t = 1, smoothing 0.1 (below).  Row 2: ignored (-100).
	 * Row 3: t = 3 (out of range): NaN.  Row 4: t = -3 (not the ignore
	 * index, out of range): NaN.
	 */
	const double l2 = log(2), l5 = log(5), l8 = log(8);
	double x[5 * 4], loss[5], lse[5], dx[5 * 4];
	int64_t t[5] = { 2, 1, -100, 3, -3 };
	(void)state;
	for (int r = 0; r < 5; r++) {
		x[r * 4 + 0] = 0;
		x[r * 4 + 1] = l2;
		x[r * 4 + 2] = l5;
		x[r * 4 + 3] = 99; /* padding: never read */
	}
	ktune__ref_cross_entropy(x, 4, t, -100, 0, 0, loss, lse, 5, 3);
	assert_close(loss[0], l8 - l5, 1e-15, "ce loss", 0);
	assert_close(loss[1], l8 - l2, 1e-15, "ce loss", 1);
	assert_close(lse[0], l8, 1e-15, "ce lse", 0);
	assert_true(loss[2] == 0 && lse[2] == 0);
	assert_true(isnan(loss[3]) && isnan(loss[4]));
	assert_close(lse[3], l8, 1e-15, "ce lse", 3);

	/* smoothing eps: lse - (1 - eps) z_t - eps mean z */
	ktune__ref_cross_entropy(x, 4, t, -100, 0.1, 0, loss, lse, 2, 3);
	assert_close(loss[1], l8 - 0.9 * l2 - 0.1 * (l2 + l5) / 3, 1e-15, "ce smoothed loss", 1);

	/* soft cap 1: z = tanh x */
	const double z[3] = { 0, tanh(l2), tanh(l5) }; /* 0, 0.6, 12/13 */
	const double lse_z = log(exp(z[0]) + exp(z[1]) + exp(z[2]));
	ktune__ref_cross_entropy(x, 4, t, -100, 0, 1, loss, lse, 1, 3);
	assert_close(z[1], 0.6, 1e-15, "tanh ln 2", 0);
	assert_close(loss[0], lse_z - 12.0 / 13, 1e-15, "ce capped loss", 0);
	assert_close(lse[0], lse_z, 1e-15, "ce capped lse", 0);

	/* reductions: the mean over the 2 rows not ignored; a mean of none is 0; none is no reduction */
	double fine[3] = { 1, 0, 2 };
	int64_t ft[3] = { 0, 7, 1 };
	assert_close(ktune__ref_cross_entropy_reduce(fine, ft, 7, KTUNE_REDUCTION_MEAN, 3), 1.5, 0, "ce mean", 0);
	double with_nan[2] = { 1, NAN };
	assert_true(isnan(ktune__ref_cross_entropy_reduce(with_nan, ft, 7, KTUNE_REDUCTION_MEAN, 2)));
	assert_close(ktune__ref_cross_entropy_reduce(fine, ft, 7, KTUNE_REDUCTION_SUM, 3), 3, 0, "ce sum", 0);
	int64_t all_ignored[3] = { 7, 7, 7 };
	assert_true(ktune__ref_cross_entropy_reduce(fine, all_ignored, 7, KTUNE_REDUCTION_MEAN, 3) == 0);
	assert_true(isnan(ktune__ref_cross_entropy_reduce(fine, ft, 7, KTUNE_REDUCTION_NONE, 3)));

	/* gradient of the mean, dloss 2, rows 0 and 2 (ignored): count 1, p = [1, 2, 5] / 8 */
	int64_t tg[2] = { 2, -100 };
	double lse2[2] = { l8, 0 }, two = 2;
	for (int i = 0; i < 8; i++)
		dx[i] = -7;
	ktune__ref_cross_entropy_backward(x, 4, tg, -100, 0, 0, lse2, KTUNE_REDUCTION_MEAN, &two, dx, 4, 2, 3);
	assert_close(dx[0], 2 * 0.125, 1e-15, "ce dx", 0);
	assert_close(dx[1], 2 * 0.25, 1e-15, "ce dx", 1);
	assert_close(dx[2], 2 * (0.625 - 1), 1e-15, "ce dx", 2);
	assert_true(dx[3] == -7); /* padding untouched */
	for (int c = 0; c < 3; c++)
		assert_true(dx[4 + c] == 0);
	/* none: each row its own dloss; smoothing 0.1 moves 0.1 / 3 from the target to every class */
	double g2[2] = { 3, 5 };
	int64_t tn[2] = { 2, 0 };
	ktune__ref_cross_entropy_backward(x, 4, tn, -100, 0.1, 0, lse2, KTUNE_REDUCTION_NONE, g2, dx, 4, 1, 3);
	assert_close(dx[0], 3 * (0.125 - 0.1 / 3), 1e-15, "ce smoothed dx", 0);
	assert_close(dx[2], 3 * (0.625 - 0.9 - 0.1 / 3), 1e-15, "ce smoothed dx", 2);
}

/* A matrix of rows x ld doubles, padding (past cols) set to 1234. */
static double *ce_matrix(int64_t rows, int64_t cols, int64_t ld, double value)
{
	double *m = malloc((size_t)(rows * ld) * sizeof(double));
	assert_non_null(m);
	for (int64_t i = 0; i < rows * ld; i++)
		m[i] = i % ld < cols ? value : 1234;
	return m;
}

/*
 * Awkward row lengths, one row and many, padded strides: rows of one value
 * give log V (whatever the target, smoothing, cap); a one-hot row x_t = a,
 * the rest 0, gives log(1 + (V - 1) e^-a); every row's gradient sums to 0
 * (uncapped); padding is left alone; every target ignored gives 0.
 */
static void test_rowwise_ref__cross_entropy_awkward_rows(void **state)
{
	static const int64_t vocab[] = { 1, 7, 33, 4097, 65537, 262144 };
	(void)state;
	for (size_t vi = 0; vi < sizeof(vocab) / sizeof(vocab[0]); vi++) {
		const int64_t v = vocab[vi], ld = v + 3, rows = v > 4097 ? 3 : 67;
		double *x = ce_matrix(rows, v, ld, 0.75), *dx = ce_matrix(rows, v, ld, 0);
		double *loss = malloc((size_t)rows * sizeof(double)), *lse = malloc((size_t)rows * sizeof(double));
		int64_t *t = malloc((size_t)rows * sizeof(int64_t));
		assert_true(loss && lse && t);
		for (int64_t r = 0; r < rows; r++)
			t[r] = (r * 7919) % v;
		for (int cfg = 0; cfg < 4; cfg++) {
			double eps = cfg & 1 ? 0.1 : 0, cap = cfg & 2 ? 2.0 : 0;
			ktune__ref_cross_entropy(x, ld, t, -1, eps, cap, loss, lse, rows, v);
			for (int64_t r = 0; r < rows; r++) {
				assert_close(loss[r], log((double)v), 1e-12, "ce uniform loss", (int)r);
				assert_close(lse[r], (cap > 0 ? cap * tanh(0.75 / cap) : 0.75) + log((double)v), 1e-12,
					     "ce uniform lse", (int)r);
			}
		}
		/* one-hot rows: x_t = a, the rest 0; rows 0 and 1 of 1 row and of many */
		for (int64_t r = 0; r < rows; r++)
			for (int64_t c = 0; c < v; c++)
				x[r * ld + c] = c == t[r] ? 2.5 : 0;
		ktune__ref_cross_entropy(x, ld, t, -1, 0, 0, loss, lse, rows, v);
		for (int64_t r = 0; r < rows; r++)
			assert_close(loss[r], log(1 + (double)(v - 1) * exp(-2.5)), 1e-10, "ce one-hot loss", (int)r);
		double dloss = 1.5;
		for (int red = 0; red < 2; red++) {
			ktune__ref_cross_entropy_backward(x, ld, t, -1, 0.1, 0, lse, (ktune_reduction)red, &dloss, dx, ld,
							  rows, v);
			for (int64_t r = 0; r < rows; r++) {
				double s = 0;
				for (int64_t c = 0; c < v; c++)
					s += dx[r * ld + c];
				assert_close(s, 0, 1e-13 + 1e-15 * (double)v, "ce gradient's row sum", (int)r);
				for (int64_t c = v; c < ld; c++)
					assert_true(dx[r * ld + c] == 1234);
			}
			/* the one-hot row's target: g (p_t - 1 + eps - eps / V) */
			double g = red == 0 ? dloss / (double)rows : dloss, pt = exp(2.5 - lse[0]);
			assert_close(dx[t[0]], g * (pt - 0.9 - 0.1 / (double)v), 1e-12, "ce target's gradient", 0);
		}
		/* every target ignored: losses 0, mean and sum 0, gradients 0 */
		for (int64_t r = 0; r < rows; r++)
			t[r] = -1;
		ktune__ref_cross_entropy(x, ld, t, -1, 0.1, 2, loss, lse, rows, v);
		assert_true(ktune__ref_cross_entropy_reduce(loss, t, -1, KTUNE_REDUCTION_MEAN, rows) == 0);
		assert_true(ktune__ref_cross_entropy_reduce(loss, t, -1, KTUNE_REDUCTION_SUM, rows) == 0);
		ktune__ref_cross_entropy_backward(x, ld, t, -1, 0.1, 2, lse, KTUNE_REDUCTION_MEAN, &dloss, dx, ld, rows, v);
		for (int64_t i = 0; i < rows * ld; i++)
			assert_true(i % ld < v ? dx[i] == 0 : dx[i] == 1234);
		free(x), free(dx), free(loss), free(lse), free(t);
	}
}

/* Logits of +-1e4: finite losses and gradients, and the exact values (e^-2e4 is 0 in doubles). */
static void test_rowwise_ref__cross_entropy_large_logits(void **state)
{
	enum { V = 33, LD = 35 };
	double x[2 * LD], loss[2], lse[2], dx[2 * LD];
	int64_t t[2] = { 0, 1 };
	(void)state;
	for (int c = 0; c < LD; c++)
		x[c] = x[LD + c] = c % 2 ? -1e4 : 1e4; /* 17 maxima of 1e4 (even columns), 16 of -1e4 */
	ktune__ref_cross_entropy(x, LD, t, -100, 0, 0, loss, lse, 2, V);
	assert_close(loss[0], log(17), 1e-12, "ce loss at the max", 0);
	assert_close(loss[1], 2e4 + log(17), 1e-9, "ce loss at the min", 1);
	assert_close(lse[0], 1e4 + log(17), 1e-9, "ce lse", 0);
	/* smoothed: + eps (lse - mean z) - eps (lse - z_t)... as its definition, relative to the max */
	ktune__ref_cross_entropy(x, LD, t, -100, 0.1, 0, loss, lse, 2, V);
	double mean_z = (17 * 1e4 - 16 * 1e4) / V;
	assert_close(loss[0], lse[0] - 0.9 * 1e4 - 0.1 * mean_z, 1e-9, "ce smoothed loss at 1e4", 0);
	/* capped at 30: z = +-30 tanh(1e4 / 30) = +-30 */
	ktune__ref_cross_entropy(x, LD, t, -100, 0, 30, loss, lse, 2, V);
	assert_close(loss[1], 60 + log(17 + 16 * exp(-60)), 1e-9, "ce capped loss", 1);
	double one = 1;
	ktune__ref_cross_entropy_backward(x, LD, t, -100, 0, 30, lse, KTUNE_REDUCTION_SUM, &one, dx, LD, 2, V);
	for (int r = 0; r < 2; r++)
		for (int c = 0; c < V; c++)
			assert_true(isfinite(dx[r * LD + c]) && dx[r * LD + c] == 0); /* 1 - tanh^2 = 0 in doubles */
	ktune__ref_cross_entropy(x, LD, t, -100, 0, 0, loss, lse, 2, V);
	ktune__ref_cross_entropy_backward(x, LD, t, -100, 0, 0, lse, KTUNE_REDUCTION_SUM, &one, dx, LD, 2, V);
	assert_close(dx[0], 1.0 / 17 - 1, 1e-12, "ce dx at the target max", 0);
	assert_close(dx[2], 1.0 / 17, 1e-12, "ce dx at another max", 2);
	assert_true(dx[1] == 0 && dx[LD + 1] == -1);
}

/* L = dloss * reduce(loss(x)): the backward against central differences, smoothing and cap on. */
static double ce_reduced(const double *x, const int64_t *t, int rows, int cols, int ld, ktune_reduction red)
{
	double loss[4], lse[4];
	ktune__ref_cross_entropy(x, ld, t, 5, 0.2, 1.5, loss, lse, rows, cols);
	return 0.7 * ktune__ref_cross_entropy_reduce(loss, t, 5, red, rows);
}

static void test_rowwise_ref__cross_entropy_finite_differences(void **state)
{
	enum { ROWS = 4, COLS = 7, LD = 9 };
	double x[ROWS * LD], dx[ROWS * LD], loss[ROWS], lse[ROWS], dloss = 0.7;
	int64_t t[ROWS] = { 3, 5, 0, 6 }; /* row 1 ignored (5 is the ignore index) */
	const double h = 1e-6;
	(void)state;
	for (int i = 0; i < ROWS * LD; i++)
		x[i] = (double)((i * 37) % 23) / 5 - 2;
	for (int red = 0; red < 2; red++) {
		ktune__ref_cross_entropy(x, LD, t, 5, 0.2, 1.5, loss, lse, ROWS, COLS);
		ktune__ref_cross_entropy_backward(x, LD, t, 5, 0.2, 1.5, lse, (ktune_reduction)red, &dloss, dx, LD, ROWS,
						  COLS);
		for (int r = 0; r < ROWS; r++)
			for (int c = 0; c < COLS; c++) {
				double keep = x[r * LD + c];
				x[r * LD + c] = keep + h;
				double up = ce_reduced(x, t, ROWS, COLS, LD, (ktune_reduction)red);
				x[r * LD + c] = keep - h;
				double down = ce_reduced(x, t, ROWS, COLS, LD, (ktune_reduction)red);
				x[r * LD + c] = keep;
				assert_close(dx[r * LD + c], (up - down) / (2 * h), 1e-8, red ? "ce sum dx" : "ce mean dx",
					     r * LD + c);
			}
	}
}

/* The LM head's loss, reduced and times dloss, for central differences. */
static double lce_reduced(const double *h, const double *w, const int64_t *t, ktune_reduction red)
{
	double loss[5], dh[5 * 3], dw[7 * 3];
	assert_int_equal(ktune__ref_linear_cross_entropy(h, w, t, 2, 0.1, 2.5, red, 1.3, NULL, loss, dh, dw, 5, 3, 7), 0);
	return 1.3 * ktune__ref_cross_entropy_reduce(loss, t, 2, red, 5);
}

static void test_rowwise_ref__linear_cross_entropy(void **state)
{
	enum { ROWS = 5, DIM = 3, V = 7 };
	double h[ROWS * DIM], w[V * DIM], logits[ROWS * V], loss[ROWS], want[ROWS], dh[ROWS * DIM], dw[V * DIM];
	int64_t t[ROWS] = { 4, 2, 0, 6, 3 }; /* row 1 ignored (2 is the ignore index) */
	const double eps = 1e-6;
	(void)state;
	for (int i = 0; i < ROWS * DIM; i++)
		h[i] = (double)((i * 37) % 11) / 4 - 1.2;
	for (int i = 0; i < V * DIM; i++)
		w[i] = (double)((i * 53) % 17) / 8 - 1;
	for (int r = 0; r < ROWS; r++)
		for (int v = 0; v < V; v++)
			logits[r * V + v] = h[r * DIM] * w[v * DIM] + h[r * DIM + 1] * w[v * DIM + 1] +
					    h[r * DIM + 2] * w[v * DIM + 2];
	ktune__ref_cross_entropy(logits, V, t, 2, 0.1, 2.5, want, NULL, ROWS, V);
	assert_int_equal(ktune__ref_linear_cross_entropy(h, w, t, 2, 0.1, 2.5, KTUNE_REDUCTION_NONE, 1, NULL, loss, dh, dw,
							 ROWS, DIM, V),
			 -1);
	for (int red = 0; red < 2; red++) {
		assert_int_equal(ktune__ref_linear_cross_entropy(h, w, t, 2, 0.1, 2.5, (ktune_reduction)red, 1.3, NULL,
								 loss, dh, dw, ROWS, DIM, V),
				 0);
		for (int r = 0; r < ROWS; r++)
			assert_close(loss[r], want[r], 1e-14, "lce loss", r);
		double *vars[2] = { h, w }, *grads[2] = { dh, dw };
		const int counts[2] = { ROWS * DIM, V * DIM };
		for (int k = 0; k < 2; k++)
			for (int i = 0; i < counts[k]; i++) {
				double keep = vars[k][i];
				vars[k][i] = keep + eps;
				double up = lce_reduced(h, w, t, (ktune_reduction)red);
				vars[k][i] = keep - eps;
				double down = lce_reduced(h, w, t, (ktune_reduction)red);
				vars[k][i] = keep;
				assert_close(grads[k][i], (up - down) / (2 * eps), 1e-7, k ? "lce dweight" : "lce dhidden", i);
			}
	}
	/* the ignored row's dhidden is 0 */
	for (int d = 0; d < DIM; d++)
		assert_true(dh[1 * DIM + d] == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rowwise_ref__softmax),
		cmocka_unit_test(test_rowwise_ref__rmsnorm),
		cmocka_unit_test(test_rowwise_ref__layernorm),
		cmocka_unit_test(test_rowwise_ref__layernorm_backward),
		cmocka_unit_test(test_rowwise_ref__layernorm_backward_finite_differences),
		cmocka_unit_test(test_rowwise_ref__cross_entropy),
		cmocka_unit_test(test_rowwise_ref__cross_entropy_awkward_rows),
		cmocka_unit_test(test_rowwise_ref__cross_entropy_large_logits),
		cmocka_unit_test(test_rowwise_ref__cross_entropy_finite_differences),
		cmocka_unit_test(test_rowwise_ref__linear_cross_entropy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
