/*
 * rowwise-ref.h - float64 CPU references of the row-wise family
 * (kernels/templates/{softmax,rmsnorm,layernorm,cross_entropy}.cu), for the
 * tuner's check and the tests: the kernels' definitions in double precision.
 *
 * Matrices are [rows, cols] with a row stride (ld, elements); vectors over
 * the columns (weight, bias, dw, db) and over the rows (mean, rstd, targets,
 * a loss a row) are contiguous.  Every function is thread-safe.
 */
#ifndef KTUNE_ROWWISE_REF_H
#define KTUNE_ROWWISE_REF_H

#include <stdint.h>

#include "ktune.h"

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

/*
 * Cross-entropy of each row of logits x [rows, cols] against its target t =
 * targets[r], with label smoothing eps and, for cap > 0, soft-capped logits:
 *
 *     z = cap > 0 ? cap tanh(x / cap) : x,   lse[r] = log sum_c exp z,
 *     loss[r] = lse[r] - (1 - eps) z[t] - eps mean_c z.
 *
 * A row whose target is ignore_index gets loss 0 and lse 0; a target out of
 * [0, cols) otherwise gives loss NaN (lse as computed).  lse may be NULL.
 */
void ktune__ref_cross_entropy(const double *x, int64_t ldx, const int64_t *targets, int64_t ignore_index,
			      double smoothing, double cap, double *loss, double *lse, int64_t rows, int64_t cols);

/*
 * The rows' losses reduced: KTUNE_REDUCTION_MEAN over the rows not
 * ignored (0 when every row is), KTUNE_REDUCTION_SUM; NONE is not a
 * reduction (NaN).
 */
double ktune__ref_cross_entropy_reduce(const double *loss, const int64_t *targets, int64_t ignore_index,
				       ktune_reduction reduction, int64_t rows);

/*
 * The gradient by x of the reduced loss times dloss, from the saved lse:
 *
 *     dx[r, c] = g[r] (exp(z - lse[r]) - (1 - eps) [c == t] - eps / cols) (cap > 0 ? 1 - (z / cap)^2 : 1)
 *
 * with g[r] = dloss[0] / count (MEAN; 0 when count, the rows not ignored,
 * is 0), dloss[0] (SUM) or dloss[r] (NONE), and 0 for an ignored row.  A
 * target out of range adds no target term.  dx may be x.
 */
void ktune__ref_cross_entropy_backward(const double *x, int64_t ldx, const int64_t *targets, int64_t ignore_index,
				       double smoothing, double cap, const double *lse, ktune_reduction reduction,
				       const double *dloss, double *dx, int64_t lddx, int64_t rows, int64_t cols);

/*
 * The LM head (ktune_linear_cross_entropy): logits = hidden @ weight^T
 * (hidden [rows, dim], weight [vocab, dim], both contiguous), each row's
 * loss as ktune__ref_cross_entropy gives it, and the gradients of the mean
 * (over the rows not ignored) or sum times dloss: dlogits as
 * ktune__ref_cross_entropy_backward, dhidden = dlogits @ weight [rows, dim],
 * dweight = dlogits^T @ hidden [vocab, dim].  round, if not NULL, is
 * applied to each logit and each dlogit as they are formed (what a kernel
 * storing them in f16 or bf16 does).  Returns -1 for KTUNE_REDUCTION_NONE
 * or out of memory, else 0.
 */
int ktune__ref_linear_cross_entropy(const double *hidden, const double *weight, const int64_t *targets,
				    int64_t ignore_index, double smoothing, double cap, ktune_reduction reduction,
				    double dloss, double (*round)(double), double *loss, double *dhidden,
				    double *dweight, int64_t rows, int64_t dim, int64_t vocab);

#endif
