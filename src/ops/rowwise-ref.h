/*
 * rowwise-ref.h - float64 CPU references of the row-wise family
 * (kernels/templates/{softmax,rmsnorm,layernorm}.cu), for the tuner's
 * check and the tests: the kernels' definitions in double precision.
 *
 * Matrices are [rows, cols] with a row stride (ld, elements); vectors over
 * the columns (weight, bias, dw, db) and over the rows (mean, rstd) are
 * contiguous.  Every function is thread-safe.
 */
#ifndef KTUNE_ROWWISE_REF_H
#define KTUNE_ROWWISE_REF_H

#include <stdint.h>

/* y = softmax(x) over each row; a row of -inf only gives zeros.  y may be x. */
void ktune__ref_softmax(const double *x, int64_t ldx, double *y, int64_t ldy, int64_t rows, int64_t cols);

/* dx = y * (dy - sum(y * dy)) over each row.  dx may be dy. */
void ktune__ref_softmax_backward(const double *y, int64_t ldy, const double *dy, int64_t lddy, double *dx,
				 int64_t lddx, int64_t rows, int64_t cols);

/*
 * h = x + res (res NULL: h = x; h_out, if not NULL, gets h), rstd[r] =
 * 1 / sqrt(mean(h^2) + eps), y = h * rstd * w.
 */
void ktune__ref_rmsnorm(const double *x, int64_t ldx, const double *res, int64_t ldres, const double *w,
			double eps, double *y, int64_t ldy, double *rstd, double *h_out, int64_t ldh,
			int64_t rows, int64_t cols);

/*
 * From h, w, rstd and dy: dx = rstd (dy w - h rstd^2 mean(dy w h)) and
 * dw = sum over rows of dy h rstd.
 */
void ktune__ref_rmsnorm_backward(const double *h, int64_t ldh, const double *w, const double *rstd,
				 const double *dy, int64_t lddy, double *dx, int64_t lddx, double *dw,
				 int64_t rows, int64_t cols);

/*
 * mean[r] = mean(x), rstd[r] = 1 / sqrt(mean((x - mean)^2) + eps) (two
 * passes), y = (x - mean) * rstd * w + b.  y may be x.
 */
void ktune__ref_layernorm(const double *x, int64_t ldx, const double *w, const double *b, double eps, double *y,
			  int64_t ldy, double *mean, double *rstd, int64_t rows, int64_t cols);

/*
 * From x, w, mean, rstd and dy, with xhat = (x - mean) rstd and g = dy w:
 * dx = rstd (g - mean(g) - xhat mean(g xhat)), dw = sum over rows of dy
 * xhat, db = sum over rows of dy.  dx may be dy.
 */
void ktune__ref_layernorm_backward(const double *x, int64_t ldx, const double *w, const double *mean,
				   const double *rstd, const double *dy, int64_t lddy, double *dx, int64_t lddx,
				   double *dw, double *db, int64_t rows, int64_t cols);

#endif
