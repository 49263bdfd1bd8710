/*
 * cross_entropy.cu - ktune's cross-entropy loss over the rows of logits
 * x [rows, V] (V = cols, the vocabulary) against int64 class targets, with
 * label smoothing and logit soft-capping, and its gradient:
 *
 *     z[r,c]  = SOFTCAP ? cap tanh(x[r,c] / cap) : x[r,c]
 *     lse[r]  = log sum_c exp z[r,c]
 *     loss[r] = lse[r] - (1 - eps) z[r,t] - eps / V sum_c z[r,c]              t = targets[r]
 *     dx[r,c] = g[r] (exp(z[r,c] - lse[r]) - (1 - eps) [c == t] - eps / V) (SOFTCAP ? 1 - (z[r,c] / cap)^2 : 1)
 *
 * eps is the label smoothing (0 unless SMOOTHING), all math fp32.  A row
 * whose target is ignore_index is ignored: its logits are not read, its
 * loss and lse are 0 and its gradient is 0.  A target outside [0, V) that
 * is not ignore_index makes its row's loss NaN (and so a mean or sum; its
 * gradient has no target term).  g[r] is the gradient of the reduced loss
 * by row r's loss, from dloss (the backward's input: one float, or one a
 * row for none) or grad_scale (the fused pass's):
 *
 *     REDUCTION 0 (mean): dloss / count, count = the rows not ignored (g = 0 when count = 0)
 *     REDUCTION 1 (sum):  dloss
 *     REDUCTION 2 (none): dloss[r]
 *
 * Passes (PASS, the op's variant):
 *     0 forward:  loss_rows[r] and lse[r] (two reductions a row: the max, then three sums at once)
 *     1 backward: dx from x, targets, lse and dloss (no reduction: each element on its own)
 *     2 fused:    loss_rows[r] and dx from one read of x; dx may be x (in place)
 * loss_rows is the caller's loss for none, else scratch that
 * ce_reduce_kernel adds up in a fixed order (one block) into the mean or
 * sum; ce_count_kernel counts the rows not ignored first when the gradient
 * needs it (mean).  No atomics: every output is bit-identical run to run.
 *
 * Numerics: exponentials are taken of z - max (never over 0), the loss as
 * log(sum exp(z - max)) - (z_t - max): logits of magnitude 1e4 give no
 * overflow and no cancellation.  The separate backward takes exp(z - lse)
 * from the saved lse, whose fp32 rounding is relative to |lse| (1e-3 at
 * 1e4): the fused pass does not have that error.  tanh is 1 - 2 / (1 +
 * e^2y), absolutely accurate to about 1e-7, and exact +-1 where e^2y
 * overflows or underflows.
 *
 * Entry points:
 *     ce_kernel(const elem *x, const long long *targets, float *lse, const float *dloss,
 *               float *loss_rows, elem *dx, const long long *count, long long rows,
 *               long long cols, long long ld_x, long long ld_dx, long long ignore_index,
 *               float smoothing, float cap, float inv_cap, float grad_scale)
 *         forward writes lse and loss_rows; backward reads lse and dloss, writes dx;
 *         fused writes loss_rows and dx.  count (mean with a gradient) is
 *         ce_count_kernel's; unused pointers may be NULL.
 *     ce_count_kernel(const long long *targets, long long rows, long long ignore_index,
 *                     long long *count)                       (REDUCTION 0, PASS 1 and 2)
 *     ce_reduce_kernel(const float *loss_rows, const long long *targets, long long rows,
 *                      long long ignore_index, float *loss)   (REDUCTION 0 and 1, PASS 0 and 2)
 *
 * Unaligned rows (ALIGNED=0) with VEC > 1 are read in vectors all the
 * same (SHIFTED): each row from the VEC_BYTES-aligned address at or below
 * its start, s = 0 to VEC - 1 elements before it (its shift, from its
 * address), so that a thread's vector i holds the row's columns
 * item_col - s ... ; a vector wholly inside the row is one access, the
 * partial first and last ones are read and written element by element
 * (nothing outside the row is touched), and a thread's registers hold
 * cols + VEC - 1 elements.  The gradient's row is written from the same
 * registers: in vectors where its shift is x's (in place; or x and dx of
 * the same misalignment, row strides congruent mod VEC_BYTES), element by
 * element where not.  The aligned configs' code is unchanged (s = 0).
 *
 * Tunables: PASS, REDUCTION, SMOOTHING, SOFTCAP (the op's variant;
 * cross_entropy.cuh) and KEEP below; DTYPE, ALIGNED, VEC, THREADS, CACHE, MIN_WARPS (prelude.cuh);
 * COLS, ROW_THREADS, CLUSTER, PREFETCH (rowwise.cuh).
 *
 * Launch:
 *   ce_kernel:
 *     block = (THREADS, 1, 1)
 *     grid  = (CLUSTER * min(ceil(rows / ROWS_PER_BLOCK), SMs * BLOCKS_PER_SM / CLUSTER), 1, 1),
 *             no cap when BLOCKS_PER_SM = 0 (a launch parameter); any
 *             multiple of CLUSTER is correct (the blocks walk the rows)
 *   ce_count_kernel, ce_reduce_kernel: block = (1024, 1, 1), grid = (1, 1, 1)
 *
 * Limits: 1 <= cols <= COLS; ALIGNED=1 requires 16-byte aligned x and dx
 * and row strides, ALIGNED=0 element-aligned ones (COLS is then the longest
 * row: ITEMS * ROW_SPAN - (VEC - 1) with VEC > 1); cap > 0 with SOFTCAP;
 * sm_90 for CLUSTER > 1.
 */

/* ---------------------------------------------------------------- tunables */

#ifndef KEEP
#define KEEP 0 /* fused: 1 keeps what the gradient needs in fp32 (exp(z - max), or z when capped); 0 takes it again */
#endif

/*
 * The unaligned class with vectors: prelude.cuh's vectors (its ALIGNED=1,
 * which promises that every vector the kernel touches is aligned: the
 * shifted rows' are), SHIFTED rows.
 */
#if defined(ALIGNED) && defined(VEC)
#if !ALIGNED && VEC > 1
#define SHIFTED 1
#undef ALIGNED
#define ALIGNED 1
#endif
#endif
#ifndef SHIFTED
#define SHIFTED 0 /* 1: rows read from the aligned address at or below their start (set above) */
#endif

#include "prelude.cuh"
#include "rowwise.cuh"
#include "cross_entropy.cuh" /* the flags' defaults, special functions, the count and reduce kernels */

static_assert(KEEP == 0 || (KEEP == 1 && PASS == 2), "KEEP is for the fused pass");
static_assert(!SHIFTED || ITEMS * ROW_SPAN >= COLS + VEC_W - 1, "a shifted row of COLS fits the registers");

/* Column of a thread's vector i as an int (a row is at most COLS < 2^31 long): fewer registers than i64. */
static __device__ __forceinline__ int item_col32(const row_place &p, int i)
{
	return ((i * CLUSTER + p.rank) * ROW_THREADS + p.lane) * VEC_W;
}

/*
 * rowwise.cuh's row_keep_raw, which ptxas sees through (its asm is empty,
 * and the values unchanged): here every word is XORed with `zero`, a zero
 * that neither the compiler nor ptxas can prove is one, so that what was
 * derived from the row before a reduction (fp32 values, exponentials,
 * capped logits) is derived again after it rather than held in registers
 * across it (ptxas held the fused pass's 32 exponentials, and spilled).
 * In asm: a C ^ let the compiler move the XOR past the conversions,
 * (w ^ z) << 16 = (w << 16) ^ (z << 16), and keep them after all.
 */
#if PASS != 1
static __device__ __forceinline__ void ce_keep_raw(row_raw &v, u32 zero)
{
#pragma unroll
	for (int i = 0; i < ITEMS; i++)
#pragma unroll
		for (int k = 0; k < VEC_WORDS; k++)
			asm volatile("xor.b32 %0, %0, %1;" : "+r"(v[i].w[k]) : "r"(zero));
}
#endif

/* ------------------------------------------------------------ shifted rows */

/*
 * A row's shift: the elements it starts past the VEC_BYTES-aligned address
 * at or below it, 0 to VEC_W - 1 (0 unless SHIFTED).  A thread's vector at
 * column c (item_col32) then holds the row's columns c - s ... c - s +
 * VEC_W - 1: whole when c >= s and c + VEC_W <= n + s, and element e of it
 * inside the row when s <= e < n + s.
 */
static __device__ __forceinline__ int row_shift(const elem *row)
{
#if SHIFTED
	return (int)((u32)((u64)row / ELEM_BYTES) % VEC_W);
#else
	(void)row;
	return 0;
#endif
}

#if SHIFTED
#define ROW_WHOLE(c, n, s) ((c) >= (s) && (c) + VEC_W <= (n) + (s))
#define ROW_INSIDE(e, n, s) ((e) >= (s) && (e) < (n) + (s))
#define ROW_HELD(col, s) ((col) >= 0 ? (col) + (s) : (col)) /* where column col (or a negative tcol) is held */
#else
#define ROW_WHOLE(c, n, s) ((c) + VEC_W <= (n))
#define ROW_INSIDE(e, n, s) ((e) < (n))
#define ROW_HELD(col, s) (col)
#endif

/*
 * rowwise.cuh's row_load and row_store, addressed from the thread's first
 * element with constant offsets (ROW_SPAN elements a vector): one 64-bit
 * address a row, where 64-bit columns held across the walk took a
 * register pair a vector.  Shifted, the address is that of the row's
 * aligned start (row - s), which the first vector touches only element by
 * element.
 */
static __device__ __forceinline__ void ce_row_load(const elem *row, int n, const row_place &p, row_raw &v, float fill)
{
	const int s = row_shift(row);
	const int c0 = item_col32(p, 0);
	const elem *at = row - s + c0;
#pragma unroll
	for (int i = 0; i < ITEMS; i++) {
		const int c = c0 + i * ROW_SPAN;
		if (ROW_WHOLE(c, n, s)) {
			v[i] = load_vec(at + i * ROW_SPAN);
		} else {
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				vec_set(v[i], j, ROW_INSIDE(c + j, n, s) ? load_elem(at + i * ROW_SPAN + j) : fill);
		}
	}
}

#if PASS != 0
/*
 * Stores a row held as loaded from a row of shift s.  Shifted, a gradient
 * row of another shift (dx misaligned unlike x) takes every element on its
 * own, each at the column it came from.
 */
static __device__ __forceinline__ void ce_row_store(elem *row, int n, int s, const row_place &p, const row_raw &v)
{
	const int c0 = item_col32(p, 0);
	elem *at = row - s + c0;
#if SHIFTED
	if (row_shift(row) != s) {
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				if (ROW_INSIDE(c0 + i * ROW_SPAN + j, n, s))
					store_elem(at + i * ROW_SPAN + j, vec_get(v[i], j));
		return;
	}
#endif
#pragma unroll
	for (int i = 0; i < ITEMS; i++) {
		const int c = c0 + i * ROW_SPAN;
		if (ROW_WHOLE(c, n, s)) {
			store_vec(at + i * ROW_SPAN, v[i]);
		} else {
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				if (ROW_INSIDE(c + j, n, s))
					store_elem(at + i * ROW_SPAN + j, vec_get(v[i], j));
		}
	}
}
#endif

/*
 * The sums of N floats over the thread's row, in one barrier (two with a
 * cluster), the same bits in every thread of the row on every run:
 * rowwise.cuh's row_reduce for several values, with its warps' partials
 * added by a butterfly of shuffles, each lane loading one warp's, rather
 * than one after another (ptxas loaded the 32 warps' N partials at once
 * into as many registers, and spilled).  rowwise.cuh is hashed into the
 * shipped tuning of the other row-wise ops: this stays here until it is
 * next re-swept.
 */
template <int N>
static __device__ __forceinline__ void row_sums(float (&x)[N], int &parity)
{
#pragma unroll
	for (int s = (ROW_THREADS < 32 ? ROW_THREADS : 32) / 2; s > 0; s >>= 1)
#pragma unroll
		for (int k = 0; k < N; k++)
			x[k] += __shfl_xor_sync(0xffffffffu, x[k], s);
#if ROW_THREADS > 32 || CLUSTER > 1
	__shared__ float warp_sums[2][N][THREADS / 32];
	const int first = (threadIdx.x / ROW_THREADS) * ROW_WARPS, lane = threadIdx.x % 32;
	if (lane == 0)
#pragma unroll
		for (int k = 0; k < N; k++)
			warp_sums[parity][k][threadIdx.x / 32] = x[k];
	__syncthreads();
#pragma unroll
	for (int k = 0; k < N; k++) {
		float y = lane < ROW_WARPS ? warp_sums[parity][k][first + lane] : 0.0f;
#pragma unroll
		for (int s = 16; s > 0; s >>= 1)
			y += __shfl_xor_sync(0xffffffffu, y, s);
		x[k] = y;
	}
#if CLUSTER > 1
	__shared__ float block_sums[2][N];
	if (threadIdx.x == 0)
#pragma unroll
		for (int k = 0; k < N; k++)
			block_sums[parity][k] = x[k];
	cluster_sync();
#pragma unroll
	for (int k = 0; k < N; k++) {
		float y = cluster_load(&block_sums[parity][k], 0);
#pragma unroll
		for (int r = 1; r < CLUSTER; r++)
			y += cluster_load(&block_sums[parity][k], r);
		x[k] = y;
	}
#endif
	parity ^= 1;
#endif
}

/* ----------------------------------------------------------------- the rows */

/*
 * The one thread of the row's group whose share holds column c (c >= 0; a
 * shifted row's column col is at c = col + s, ROW_HELD):
 * c = ((i * CLUSTER + rank) * ROW_THREADS + lane) * VEC_W + j.
 */
static __device__ __forceinline__ bool holds_col(const row_place &p, int c)
{
	const int q = c / VEC_W;
	return c >= 0 && q % ROW_THREADS == p.lane && q / ROW_THREADS % CLUSTER == p.rank;
}

/*
 * The terms of the row's sums that one element z adds: exp(z - max), and z -
 * max for the smoothing.
 */
#define CE_SUMS(z)                                                  \
	do {                                                        \
		const float d_ = (z) - mz, e_ = exp2_approx(d_ * LOG2E); \
		part[0] += e_;                                      \
		if (SMOOTHING)                                      \
			part[2] += d_;                              \
		KEEP_SET(SOFTCAP ? (z) : e_);                       \
	} while (0)

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) CLUSTER_DIMS
ce_kernel(const elem *x, const long long *targets, float *lse, const float *dloss, float *loss_rows, elem *dx,
	  const long long *count, long long rows, long long cols, long long ld_x, long long ld_dx,
	  long long ignore_index, float smoothing, float cap, float inv_cap, float grad_scale)
{
	const row_place p = row_place_here();
	const i64 step = rows_step();
#if PASS != 1
	int parity = 0;
	const u32 zero = (u32)((unsigned long long)rows >> 63); /* rows >= 0: ce_keep_raw's zero */
#endif
	(void)cap, (void)inv_cap, (void)smoothing, (void)grad_scale, (void)count, (void)dloss;

	/* the gradient's constants: g (but for none backward), and the smoothing's share of every class */
#if CE_ONE_SCALE
	const float g0 = ce_grad_scale(dloss, count, grad_scale);
#endif
#if PASS != 0
#if SMOOTHING
	const float eps_v = __fdividef(smoothing, (float)cols), hit = 1.0f - smoothing;
#endif
#endif

	/*
	 * The targets are loaded a row ahead of the row's logits (two with
	 * PREFETCH), so that whether a row is read at all (not if ignored)
	 * is known without waiting on a load.  Elements past the row (and
	 * every element of a row not read) read as -inf: exp gives 0 there.
	 */
	enum { PAST = -3, IGNORED = -2, BAD = -1 }; /* a row's tcol when it has no target's column */
	row_raw v;
	i64 t_next = target_at(targets, rows_first() + p.group, rows, ignore_index);
#if PREFETCH
	row_raw next_v;
	{
		const i64 first = rows_first() + p.group;
		const bool read = first < rows && t_next != ignore_index;
		ce_row_load(x + (read ? first : 0) * ld_x, read ? (int)cols : 0, p, next_v, op_max::identity());
	}
	i64 t_after = target_at(targets, rows_first() + p.group + step, rows, ignore_index);
#endif

	for (i64 r0 = rows_first(); r0 < rows; r0 += step) {
		const i64 row = r0 + p.group;
		/* the row in one int: its target's column, or past the walk's end, ignored, out of range */
		const int tcol = row >= rows ? PAST : t_next == ignore_index ? IGNORED
			       : t_next < 0 || t_next >= cols ? BAD : (int)t_next;
		const bool live = tcol >= BAD; /* a row to compute */
#if PREFETCH
		row_copy(v, next_v);
		t_next = t_after;
		t_after = target_at(targets, row + 2 * step, rows, ignore_index);
		{
			const bool read = row + step < rows && t_next != ignore_index;
			ce_row_load(x + (read ? row + step : 0) * ld_x, read ? (int)cols : 0, p, next_v, op_max::identity());
		}
#else
		t_next = target_at(targets, row + step, rows, ignore_index);
		ce_row_load(x + (live ? row : 0) * ld_x, live ? (int)cols : 0, p, v, op_max::identity());
#endif
		/* the row's shift (0 unless SHIFTED), as its load took it */
		const int s = row_shift(x + (tcol != PAST ? row : 0) * ld_x);
		(void)s;
		/*
		 * z at the target: its one holder reads it again (its own load,
		 * before its own stores: in place is safe), rather than every
		 * element being compared with the target's column.
		 */
		const bool own = holds_col(p, ROW_HELD(tcol, s));
		const float xt = own ? load_elem(x + row * ld_x + tcol) : 0.0f;
#if SOFTCAP
		const float zt = softcap(xt, cap, inv_cap);
#else
		const float zt = xt;
#endif

#if PASS != 1
		/* ---- the max of z: of x, then capped (tanh is increasing) */
		float m = op_max::identity();
#pragma unroll
		for (int i = 0; i < ITEMS; i++)
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				m = fmaxf(m, vec_get(v[i], j));
		m = row_reduce<op_max>(m, parity);
		ce_keep_raw(v, zero);
#if SOFTCAP
		const float mz = softcap(m, cap, inv_cap);
#else
		const float mz = m;
#endif

		/*
		 * ---- sum exp(z - max), z_t - max (its holder's alone), and sum
		 * (z - max) for the smoothing.  Capped or summed, an element past
		 * the row must be left out (softcap(-inf) is -cap); whole vectors
		 * need no test.
		 */
#if KEEP
		row_f32 kept;
#define KEEP_SET(val) (kept[i][j] = (val))
#else
#define KEEP_SET(val) ((void)0)
#endif
		float part[2 + SMOOTHING] = {};
		part[1] = own ? zt - mz : 0.0f;
#pragma unroll
		for (int i = 0; i < ITEMS; i++) {
#if SOFTCAP || SMOOTHING
			const int c = item_col32(p, i), n = live ? (int)cols : 0; /* a BAD row is read */
			if (ROW_WHOLE(c, n, s)) {
#pragma unroll
				for (int j = 0; j < VEC_W; j++) {
#if SOFTCAP
					const float z = softcap(vec_get(v[i], j), cap, inv_cap);
#else
					const float z = vec_get(v[i], j);
#endif
					CE_SUMS(z);
				}
			} else {
#pragma unroll
				for (int j = 0; j < VEC_W; j++) {
#if SOFTCAP
					const float z = softcap(vec_get(v[i], j), cap, inv_cap);
#else
					const float z = vec_get(v[i], j);
#endif
					if (ROW_INSIDE(c + j, n, s))
						CE_SUMS(z);
					else
						KEEP_SET(0.0f); /* never stored */
				}
			}
#else
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				CE_SUMS(vec_get(v[i], j));
#endif
		}
#undef KEEP_SET
		row_sums(part, parity);
		ce_keep_raw(v, zero);

		/* ---- the row's loss (and lse) */
		const float ls = logf(part[0]); /* log sum exp(z - max): lse = max + ls */
#if SMOOTHING
		float loss = ls - (1.0f - smoothing) * part[1] - __fdividef(smoothing, (float)cols) * part[2];
#else
		float loss = ls - part[1];
#endif
		if (!live)
			loss = 0.0f;
		else if (tcol == BAD) /* the loss says so */
			loss = __int_as_float(0x7fc00000);
		if (tcol != PAST && p.lane == 0 && p.rank == 0) {
			loss_rows[row] = loss;
#if PASS == 0
			lse[row] = live ? mz + ls : 0.0f;
#endif
		}
#endif /* PASS != 1 */

#if PASS != 0
		/*
		 * ---- the gradient, g (p - eps / V) (1 - (z / cap)^2) for every
		 * element, then the target's element again with - (1 - eps) g.
		 */
#if PASS == 1
		const float base = live ? lse[row] : 0.0f; /* p = exp(z - lse) */
#if REDUCTION == 2
		const float g = live ? dloss[row] : 0.0f;
#else
		const float g = g0;
#endif
		const float a = g;
#else
		const float base = mz; /* p = exp(z - max) / sum */
		const float g = g0, a = g * __fdividef(1.0f, part[0]);
#endif
#if SMOOTHING
		const float b = g * eps_v, gt = g * hit;
#else
		const float b = 0.0f, gt = g;
#endif
		if (live) {
#pragma unroll
			for (int i = 0; i < ITEMS; i++)
#pragma unroll
				for (int j = 0; j < VEC_W; j++) {
#if KEEP && SOFTCAP
					const float z = kept[i][j];
#elif SOFTCAP
					const float z = softcap(vec_get(v[i], j), cap, inv_cap);
#else
					const float z = vec_get(v[i], j);
#endif
#if KEEP && !SOFTCAP
					float d = a * kept[i][j];
#else
					float d = a * exp2_approx((z - base) * LOG2E);
#endif
					if (SMOOTHING)
						d -= b;
#if SOFTCAP
					const float u = z * inv_cap;
					d *= 1.0f - u * u;
#endif
					vec_set(v[i], j, d);
				}
		} else { /* an ignored row's gradient is 0, whatever it read */
#pragma unroll
			for (int i = 0; i < ITEMS; i++)
#pragma unroll
				for (int k = 0; k < VEC_WORDS; k++)
					v[i].w[k] = 0;
		}
		ce_row_store(dx + (tcol != PAST ? row : 0) * ld_dx, tcol != PAST ? (int)cols : 0, s, p, v);
		if (own) { /* after its store of the same element: the same thread, in order */
			float d = a * exp2_approx((zt - base) * LOG2E) - b - gt;
#if SOFTCAP
			const float u = zt * inv_cap;
			d *= 1.0f - u * u;
#endif
			store_elem(dx + row * ld_dx + tcol, d);
		}
#endif /* PASS != 0 */
	}
	row_done();
}
