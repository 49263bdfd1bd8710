/*
 * rowwise-ref.c - float64 references of the row-wise kernels
 * (rowwise-ref.h).
 */
#include <math.h>
#include <stdlib.h>

#include "ops/rowwise-ref.h"

void ktune__ref_softmax(const double *x, int64_t ldx, double *y, int64_t ldy, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++) {
		const double *xr = x + r * ldx;
		double *yr = y + r * ldy, m = -INFINITY, s = 0;
		for (int64_t c = 0; c < cols; c++)
			m = xr[c] > m ? xr[c] : m;
		if (m == -INFINITY) { /* a row of -inf: zeros, as the kernel gives */
			for (int64_t c = 0; c < cols; c++)
				yr[c] = 0;
			continue;
		}
		for (int64_t c = 0; c < cols; c++)
			s += exp(xr[c] - m);
		for (int64_t c = 0; c < cols; c++)
			yr[c] = exp(xr[c] - m) / s;
	}
}

void ktune__ref_softmax_backward(const double *y, int64_t ldy, const double *dy, int64_t lddy, double *dx,
				 int64_t lddx, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++) {
		const double *yr = y + r * ldy, *gr = dy + r * lddy;
		double *dr = dx + r * lddx, d = 0;
		for (int64_t c = 0; c < cols; c++)
			d += yr[c] * gr[c];
		for (int64_t c = 0; c < cols; c++)
			dr[c] = yr[c] * (gr[c] - d);
	}
}

void ktune__ref_rmsnorm(const double *x, int64_t ldx, const double *res, int64_t ldres, const double *w,
			double eps, double *y, int64_t ldy, double *rstd, double *h_out, int64_t ldh,
			int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++) {
		double s = 0;
		for (int64_t c = 0; c < cols; c++) {
			double h = x[r * ldx + c] + (res ? res[r * ldres + c] : 0);
			s += h * h;
		}
		double k = 1 / sqrt(s / (double)cols + eps);
		for (int64_t c = 0; c < cols; c++) {
			double h = x[r * ldx + c] + (res ? res[r * ldres + c] : 0);
			if (h_out)
				h_out[r * ldh + c] = h;
			y[r * ldy + c] = h * k * w[c];
		}
		rstd[r] = k;
	}
}

void ktune__ref_rmsnorm_backward(const double *h, int64_t ldh, const double *w, const double *rstd,
				 const double *dy, int64_t lddy, double *dx, int64_t lddx, double *dw,
				 int64_t rows, int64_t cols)
{
	for (int64_t c = 0; c < cols; c++)
		dw[c] = 0;
	for (int64_t r = 0; r < rows; r++) {
		const double *hr = h + r * ldh, *gr = dy + r * lddy, k = rstd[r];
		double s = 0;
		for (int64_t c = 0; c < cols; c++) {
			s += gr[c] * w[c] * hr[c];
			dw[c] += gr[c] * hr[c] * k;
		}
		for (int64_t c = 0; c < cols; c++)
			dx[r * lddx + c] = k * (gr[c] * w[c] - hr[c] * k * k * s / (double)cols);
	}
}

void ktune__ref_layernorm(const double *x, int64_t ldx, const double *w, const double *b, double eps, double *y,
			  int64_t ldy, double *mean, double *rstd, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++) {
		const double *xr = x + r * ldx;
		double *yr = y + r * ldy, s = 0, v = 0;
		for (int64_t c = 0; c < cols; c++)
			s += xr[c];
		double m = s / (double)cols;
		for (int64_t c = 0; c < cols; c++)
			v += (xr[c] - m) * (xr[c] - m);
		double k = 1 / sqrt(v / (double)cols + eps);
		for (int64_t c = 0; c < cols; c++)
			yr[c] = (xr[c] - m) * k * w[c] + b[c];
		mean[r] = m;
		rstd[r] = k;
	}
}

void ktune__ref_layernorm_backward(const double *x, int64_t ldx, const double *w, const double *mean,
				   const double *rstd, const double *dy, int64_t lddy, double *dx, int64_t lddx,
				   double *dw, double *db, int64_t rows, int64_t cols)
{
	for (int64_t c = 0; c < cols; c++)
		dw[c] = db[c] = 0;
	for (int64_t r = 0; r < rows; r++) {
		const double *xr = x + r * ldx, *gr = dy + r * lddy, m = mean[r], k = rstd[r];
		double sg = 0, sgx = 0;
		for (int64_t c = 0; c < cols; c++) {
			double xh = (xr[c] - m) * k;
			sg += gr[c] * w[c];
			sgx += gr[c] * w[c] * xh;
			dw[c] += gr[c] * xh;
			db[c] += gr[c];
		}
		for (int64_t c = 0; c < cols; c++) {
			double xh = (xr[c] - m) * k;
			dx[r * lddx + c] = k * (gr[c] * w[c] - sg / (double)cols - xh * sgx / (double)cols);
		}
	}
}

/* The capped logit. */
static double capped(double x, double cap)
{
	return cap > 0 ? cap * tanh(x / cap) : x;
}

static int64_t count_kept(const int64_t *targets, int64_t ignore_index, int64_t rows)
{
	int64_t n = 0;
	for (int64_t r = 0; r < rows; r++)
		n += targets[r] != ignore_index;
	return n;
}

void ktune__ref_cross_entropy(const double *x, int64_t ldx, const int64_t *targets, int64_t ignore_index,
			      double smoothing, double cap, double *loss, double *lse, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++) {
		const double *xr = x + r * ldx;
		const int64_t t = targets[r];
		double m = -INFINITY, s = 0, sz = 0;
		if (t == ignore_index) {
			loss[r] = 0;
			if (lse)
				lse[r] = 0;
			continue;
		}
		for (int64_t c = 0; c < cols; c++)
			m = fmax(m, capped(xr[c], cap));
		for (int64_t c = 0; c < cols; c++) {
			double z = capped(xr[c], cap);
			s += exp(z - m);
			sz += z - m;
		}
		/* lse - (1 - eps) z_t - eps mean z, each term relative to the max: no cancellation at 1e4 */
		double ls = log(s);
		if (t < 0 || t >= cols)
			loss[r] = NAN;
		else
			loss[r] = ls - (1 - smoothing) * (capped(xr[t], cap) - m) - smoothing * sz / (double)cols;
		if (lse)
			lse[r] = m + ls;
	}
}

double ktune__ref_cross_entropy_reduce(const double *loss, const int64_t *targets, int64_t ignore_index,
				       ktune_reduction reduction, int64_t rows)
{
	double s = 0;
	for (int64_t r = 0; r < rows; r++)
		s += loss[r];
	if (reduction == KTUNE_REDUCTION_SUM)
		return s;
	if (reduction == KTUNE_REDUCTION_MEAN) {
		int64_t n = count_kept(targets, ignore_index, rows);
		return n ? s / (double)n : 0;
	}
	return NAN;
}

void ktune__ref_cross_entropy_backward(const double *x, int64_t ldx, const int64_t *targets, int64_t ignore_index,
				       double smoothing, double cap, const double *lse, ktune_reduction reduction,
				       const double *dloss, double *dx, int64_t lddx, int64_t rows, int64_t cols)
{
	int64_t n = reduction == KTUNE_REDUCTION_MEAN ? count_kept(targets, ignore_index, rows) : 0;
	for (int64_t r = 0; r < rows; r++) {
		const int64_t t = targets[r];
		double g = reduction == KTUNE_REDUCTION_NONE ? dloss[r]
			   : reduction == KTUNE_REDUCTION_SUM ? dloss[0]
			   : n ? dloss[0] / (double)n : 0;
		if (t == ignore_index)
			g = 0;
		for (int64_t c = 0; c < cols; c++) {
			double z = capped(x[r * ldx + c], cap);
			double d = exp(z - lse[r]) - (c == t ? 1 - smoothing : 0) - smoothing / (double)cols;
			if (cap > 0)
				d *= 1 - (z / cap) * (z / cap);
			dx[r * lddx + c] = t == ignore_index ? 0 : g * d;
		}
	}
}

int ktune__ref_linear_cross_entropy(const double *hidden, const double *weight, const int64_t *targets,
				    int64_t ignore_index, double smoothing, double cap, ktune_reduction reduction,
				    double dloss, double (*round)(double), double *loss, double *dhidden,
				    double *dweight, int64_t rows, int64_t dim, int64_t vocab)
{
	if (reduction == KTUNE_REDUCTION_NONE)
		return -1; /* the gradients are of one loss */
	double *logits = malloc((size_t)(rows * vocab) * sizeof(double)), *lse = malloc((size_t)rows * sizeof(double));
	if (!logits || !lse) {
		free(logits);
		free(lse);
		return -1;
	}
	for (int64_t r = 0; r < rows; r++)
		for (int64_t v = 0; v < vocab; v++) {
			double s = 0;
			for (int64_t d = 0; d < dim; d++)
				s += hidden[r * dim + d] * weight[v * dim + d];
			logits[r * vocab + v] = round ? round(s) : s;
		}
	ktune__ref_cross_entropy(logits, vocab, targets, ignore_index, smoothing, cap, loss, lse, rows, vocab);
	ktune__ref_cross_entropy_backward(logits, vocab, targets, ignore_index, smoothing, cap, lse, reduction, &dloss,
					  logits, vocab, rows, vocab); /* in place, as the kernel */
	for (int64_t i = 0; round && i < rows * vocab; i++)
		logits[i] = round(logits[i]);
	for (int64_t i = 0; i < rows * dim; i++)
		dhidden[i] = 0;
	for (int64_t i = 0; i < vocab * dim; i++)
		dweight[i] = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t v = 0; v < vocab; v++) {
			double g = logits[r * vocab + v];
			for (int64_t d = 0; d < dim; d++) {
				dhidden[r * dim + d] += g * weight[v * dim + d];
				dweight[v * dim + d] += g * hidden[r * dim + d];
			}
		}
	free(logits);
	free(lse);
	return 0;
}
