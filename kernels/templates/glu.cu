/*
 * glu.cu - ktune's gated linear units (SwiGLU, GeGLU) and their gradients,
 * over [rows, cols]:
 *
 *     BACKWARD=0:  out_a[r,c] = act(a[r,c]) * b[r,c]
 *     BACKWARD=1:  out_a[r,c] = da = dout[r,c] * b[r,c] * act'(a[r,c])
 *                  out_b[r,c] = db = dout[r,c] * act(a[r,c])
 *
 *     ACT=0:  act(a) = silu(a) = a * sigmoid(a)               (SwiGLU)
 *     ACT=1:  act(a) = 0.5 a (1 + erf(a / sqrt 2))            (GeGLU)
 *     ACT=2:  act(a) = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
 *
 * in fp32, rounded to the element type.  Element (r, c) of a tensor t is
 * t[r * ld_t + c]: a and b may be two tensors, or the two halves of one
 * [rows, 2*cols] tensor h (a = h, b = h + cols, lda = ldb = 2*cols), and
 * likewise out_a and out_b.  dout and out_b are not read or written
 * forward (they may be 0).  An output may be the input of the same
 * position (out_a = a, out_b = b), but must not overlap any input
 * otherwise.
 *
 * Entry point:
 *     glu_kernel(const elem *a, const elem *b, const elem *dout, elem *out_a, elem *out_b,
 *                long long rows, long long cols, long long lda, long long ldb,
 *                long long ld_dout, long long ld_out_a, long long ld_out_b)
 *
 * Tunables: ACT and BACKWARD (the op's variant) below; DTYPE, ALIGNED, VEC,
 * UNROLL, THREADS, CACHE (prelude.cuh).
 *
 * Launch: the items are the vectors of each row, rows * ceil(cols / VEC_W)
 * in all (VEC_W = VEC when ALIGNED, else 1):
 *     block = (THREADS, 1, 1)
 *     grid  = (min(ceil(rows * ceil(cols / VEC_W) / (THREADS * UNROLL)),
 *                  SMs * BLOCKS_PER_SM), 1, 1),
 *             no cap when BLOCKS_PER_SM = 0 (a launch parameter, not
 *             compiled in); any grid is correct
 *
 * Limits:
 *   - any rows >= 0, cols >= 0 (64-bit; rows * ceil(cols / VEC_W) below
 *     2^62); a row whose length is not a multiple of VEC_W ends element
 *     by element
 *   - ALIGNED=1 requires every pointer 16-byte aligned and every ld_* a
 *     multiple of 16 bytes (so each row starts aligned)
 */

/* ---------------------------------------------------------------- tunables */

#ifndef ACT
#define ACT 0 /* the gate's activation: 0 = silu (SwiGLU), 1 = erf GELU, 2 = tanh GELU (GeGLU) */
#endif
#ifndef BACKWARD
#define BACKWARD 0 /* 0: out_a = act(a) * b; 1: out_a = da, out_b = db from dout */
#endif

#include "prelude.cuh"

static_assert(ACT == 0 || ACT == 1 || ACT == 2, "ACT is 0, 1 or 2");
static_assert(BACKWARD == 0 || BACKWARD == 1, "BACKWARD is 0 or 1");

/* ----------------------------------------------------------------- compute */

static __device__ __forceinline__ float act(float a)
{
	return ACT == 0 ? silu(a) : ACT == 1 ? gelu_erf(a) : gelu_tanh(a);
}

#if BACKWARD
static __device__ __forceinline__ float act_grad(float a)
{
	return ACT == 0 ? silu_grad(a) : ACT == 1 ? gelu_erf_grad(a) : gelu_tanh_grad(a);
}
#endif

/* ----------------------------------------------------------------- indices */

/*
 * Item (row, col) is vector col of row `row`.  The walk's item numbers
 * (prelude.cuh) are turned into positions once per thread; after that a
 * position moves by a fixed step with one carry, never by a division.
 */
struct pos {
	i64 row, col;
};

static __device__ __forceinline__ pos pos_of(i64 item, i64 per_row)
{
	pos p = { item / per_row, item % per_row };
	return p;
}

/* p + d, for d.col < per_row. */
static __device__ __forceinline__ pos pos_add(pos p, pos d, i64 per_row)
{
	p.row += d.row;
	p.col += d.col;
	if (p.col >= per_row) {
		p.col -= per_row;
		p.row++;
	}
	return p;
}

/* ------------------------------------------------------------------ kernel */

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
glu_kernel(const elem *a, const elem *b, const elem *dout, elem *out_a, elem *out_b,
	   long long rows, long long cols, long long lda, long long ldb, long long ld_dout,
	   long long ld_out_a, long long ld_out_b)
{
	if (rows <= 0 || cols <= 0)
		return;
	const i64 per_row = (cols + VEC_W - 1) / VEC_W; /* vectors per row */
	const pos thread_step = pos_of(THREADS, per_row), grid_step = pos_of(walk_step(), per_row);

	for (pos p0 = pos_of(walk_first(), per_row); p0.row < rows; p0 = pos_add(p0, grid_step, per_row)) {
		pos p[UNROLL];
		vec av[UNROLL], bv[UNROLL];
#if BACKWARD
		vec dv[UNROLL];
#endif

		/* load: UNROLL independent vectors in flight */
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			p[u] = u ? pos_add(p[u - 1], thread_step, per_row) : p0;
			const i64 c = p[u].col * VEC_W;
			if (p[u].row < rows && c + VEC_W <= cols) {
				av[u] = load_vec(a + p[u].row * lda + c);
				bv[u] = load_vec(b + p[u].row * ldb + c);
#if BACKWARD
				dv[u] = load_vec(dout + p[u].row * ld_dout + c);
#endif
			}
		}

		/* compute and store */
#pragma unroll
		for (int u = 0; u < UNROLL; u++) {
			const i64 r = p[u].row, c = p[u].col * VEC_W;
			if (r >= rows)
				continue;
			if (c + VEC_W <= cols) {
				vec oa = {};
#if BACKWARD
				vec ob = {};
#endif
#pragma unroll
				for (int j = 0; j < VEC_W; j++) {
					const float x = vec_get(av[u], j), y = vec_get(bv[u], j);
#if BACKWARD
					const float d = vec_get(dv[u], j);
					vec_set(oa, j, d * y * act_grad(x));
					vec_set(ob, j, d * act(x));
#else
					vec_set(oa, j, act(x) * y);
#endif
				}
				store_vec(out_a + r * ld_out_a + c, oa);
#if BACKWARD
				store_vec(out_b + r * ld_out_b + c, ob);
#endif
			} else {
				/* the row's last, shorter vector: element by element */
				for (i64 i = c; i < cols; i++) {
					const float x = load_elem(a + r * lda + i), y = load_elem(b + r * ldb + i);
#if BACKWARD
					const float d = load_elem(dout + r * ld_dout + i);
					store_elem(out_a + r * ld_out_a + i, d * y * act_grad(x));
					store_elem(out_b + r * ld_out_b + i, d * act(x));
#else
					store_elem(out_a + r * ld_out_a + i, act(x) * y);
#endif
				}
			}
		}
	}
}
