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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rowwise_ref__softmax),
		cmocka_unit_test(test_rowwise_ref__rmsnorm),
		cmocka_unit_test(test_rowwise_ref__layernorm),
		cmocka_unit_test(test_rowwise_ref__layernorm_backward),
		cmocka_unit_test(test_rowwise_ref__layernorm_backward_finite_differences),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
