/*
 * gemv.cu - ktune's GEMM for a few rows of A (up to 16 a tile): the
 * weights B stream from global memory straight into mma.sync fragments,
 * with no shared-memory stage between, so that the GEMM runs at the pace
 * of B's bytes.
 *
 * Computes, as gemm.cu does (same arguments, layouts and split-K contract),
 *
 *     C = alpha * op(A) * op(B) + beta * C
 *
 * through its transpose C^T = op(B)^T op(A)^T: B's N side is the m16n8k16
 * mma's 16 rows, A's M side its 8 columns (BLOCK_M 16: two mmas).
 *
 *     TRANS_B=1: B is [N,K] (nn.Linear weights).  A lane loads 16 bytes of
 *         two rows of B (rows g and g + 8 of a 16-row group, g = lane / 4),
 *         k + 8 * (lane % 4) .. + 8: the fragments of two k16 mmas.  The
 *         order of K inside a product is free, so the mma's logical k
 *         2 * (lane % 4) + e, + 8 is the lane's k 4 j + e, 4 j + 2 + e of
 *         mma j, and A's fragment is loaded in the same order.
 *     TRANS_B=0: B is [K,N].  A lane loads 16 bytes of row k + lane / 4 of
 *         B, n + 8 * (lane % 4) .. + 8: four 8 x 8 blocks (block p holds
 *         columns n + 8 q + 2 p, + 1 of lane q), which movmatrix.trans turns
 *         into mma fragments.  The order of N inside a 32-column group is
 *         free too: acc_n() says which column of C an accumulator holds.
 *
 * Launch (as gemm.cu):
 *     block = (WARPS_N * WARPS_K * 32, 1, 1)
 *     grid  = (ceil(M / BLOCK_M) * ceil(N / BLOCK_N), 1, split_k)
 *     dynamic shared memory = SMEM_BYTES (the warps along K's partial sums)
 *
 * Arguments beyond the GEMM's own (group_size is taken and ignored: each
 * tile is one row of tiles' worth of B, read once):
 *     split_k        blocks that share one tile's K range, = gridDim.z
 *     partials       split_k > 1: fp32 scratch [split_k][M][N]; else unused
 *     tile_counters  split_k > 1: int[ceil(M/BLOCK_M) * ceil(N/BLOCK_N)], all
 *                    zero on entry and left all zero on exit; else unused
 *
 * Split-K: block (tile, s) takes k-steps [s*per_split, (s+1)*per_split) of
 * K (a step is KSTEP deep; per_split = ceil(steps / split_k)); its warps
 * along K take its batches of STAGES steps in turn and add their sums in
 * warp order; the block that arrives last at the tile's counter sums the
 * split_k partials in the order s = 0, 1, ... (so the result does not
 * depend on scheduling), applies alpha and beta, writes C and resets the
 * counter.
 *
 * Limits:
 *   - any M, N, K >= 1; A, B and C 16-byte aligned and lda, ldb, ldc
 *     multiples of 8 (the host sends aligned keys only)
 *   - beta == 0 never reads C (it may hold NaN)
 *   - sm_80 or newer (bf16 mma, movmatrix)
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_M
#define BLOCK_M 8 /* rows of C per block: 8 or 16 (one or two n8 mmas) */
#endif
#ifndef BLOCK_N
#define BLOCK_N 64 /* columns of C per block */
#endif
#ifndef WARPS_N
#define WARPS_N 2 /* warps along N; each owns BLOCK_N / WARPS_N columns */
#endif
#ifndef WARPS_K
#define WARPS_K 4 /* warps along K, taking the block's batches in turn */
#endif
#ifndef STAGES
#define STAGES 4 /* k-steps a warp has in flight: loads of a batch go out together */
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 0 /* element type: 0 = f16, 1 = bf16 */
#endif
#ifndef TRANS_A
#define TRANS_A 0 /* 0: A stored [M,K]; 1: A stored [K,M] */
#endif
#ifndef TRANS_B
#define TRANS_B 1 /* 0: B stored [K,N]; 1: B stored [N,K] */
#endif

/* ---------------------------------------------------------- derived sizes */

#define NTHREADS (WARPS_N * WARPS_K * 32)
#define WARP_N (BLOCK_N / WARPS_N) /* columns of C per warp */
#define ROW_TILES (WARP_N / 16)    /* the mma's 16-row tiles per warp */
#define M_TILES (BLOCK_M / 8)      /* the mma's 8-column tiles per block */
#define KSTEP (TRANS_B ? 32 : 16)  /* depth of one step: one 16-byte load a lane and row (group) */
#define GROUP_N (TRANS_B ? 16 : 32) /* columns of C one step's loads cover */
#define GROUPS (WARP_N / GROUP_N)
#define SMEM_BYTES ((WARPS_K - 1) * BLOCK_N * BLOCK_M * 4 + 16)

static_assert(BLOCK_M == 8 || BLOCK_M == 16, "BLOCK_M is 8 or 16");
static_assert(WARP_N % 32 == 0, "a warp owns whole 32-column groups");
static_assert(STAGES >= 1, "at least one step in flight");
static_assert(DTYPE_BF16 == 0 || DTYPE_BF16 == 1, "DTYPE_BF16 is 0 or 1");
static_assert(TRANS_A == 0 || TRANS_A == 1, "TRANS_A is 0 or 1");
static_assert(TRANS_B == 0 || TRANS_B == 1, "TRANS_B is 0 or 1");

typedef unsigned short elem; /* one f16 or bf16 value, as its bit pattern */
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

/* ------------------------------------------- PTX: the only inline assembly */

static __device__ __forceinline__ float elem_to_float(elem x)
{
#if DTYPE_BF16
	return __uint_as_float((u32)x << 16);
#else
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
	return f;
#endif
}

/* Rounds to nearest even. */
static __device__ __forceinline__ elem float_to_elem(float f)
{
	elem x;
#if DTYPE_BF16
	asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(x) : "f"(f));
#else
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
#endif
	return x;
}

/* An L2 policy for B, which each block reads once: evict it first. */
static __device__ __forceinline__ u64 evict_first_policy(void)
{
	u64 policy;
	asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
	return policy;
}

/*
 * 16 bytes of B, not kept in L1, first out of L2.  volatile: issued in
 * program order, all of a batch before the first is used.
 */
static __device__ __forceinline__ void ld_stream_16(u32 (&r)[4], const elem *p, u64 policy)
{
	asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p), "l"(policy));
}

/* 16 bytes of A, which every block reads: through L1. */
static __device__ __forceinline__ void ld_16(u32 (&r)[4], const elem *p)
{
	asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}

static __device__ __forceinline__ u32 ld_32(const elem *p)
{
	u32 r;
	asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(r) : "l"(p));
	return r;
}

/* The transpose of the 8 x 8 matrix of 16-bit values the warp holds (row lane/4, pair lane%4). */
static __device__ __forceinline__ u32 movmatrix_trans(u32 x)
{
	u32 r;
	asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
	return r;
}

/* d += a * b for one m16n8k16 tile (fragments as in the PTX ISA), fp32 accumulation. */
static __device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1)
{
#if DTYPE_BF16
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
	    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/*
 * A load that bypasses L1 (.cg), so another block's recent writes are seen.
 * volatile keeps it after the fence and the counter.
 */
static __device__ __forceinline__ float ld_cg(const float *p)
{
	float v;
	asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
	return v;
}

/* ------------------------------------------------------- index arithmetic */

static __device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }
static __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

/* Two elements in one word, lo at the lower address. */
static __device__ __forceinline__ u32 pack2(elem lo, elem hi) { return (u32)lo | (u32)hi << 16; }

/*
 * The column of C (relative to the warp's first) of accumulator
 * acc[t][.][2 * half + e]: c0, c1 of the mma's row g = lane / 4, c2, c3 of
 * row g + 8.  TRANS_B=0: tile t is mma t % 2 of 32-column group t / 2,
 * whose rows came from the movmatrix blocks 2 (t % 2) and + 1.
 */
static __device__ __forceinline__ int acc_n(int lane, int t, int half)
{
	const int g = lane / 4;
#if TRANS_B
	return t * 16 + half * 8 + g;
#else
	return (t / 2) * 32 + (g / 2) * 8 + (t % 2) * 4 + half * 2 + g % 2;
#endif
}

/* The row of C (relative to the block's first) of acc[.][mt][2 * half + e]. */
static __device__ __forceinline__ int acc_m(int lane, int mt, int e)
{
	return mt * 8 + (lane % 4) * 2 + e;
}

/* ------------------------------------------------------------------- load */

/*
 * up to 8 elements of a row from p, `valid` of them (<= 0: none), zeros
 * for the rest: the ends of a matrix, where a 16-byte load could leave it
 */
static __device__ __forceinline__ void ld_part(u32 (&r)[4], const elem *p, int valid)
{
	elem e[8];
#pragma unroll
	for (int i = 0; i < 8; i++)
		e[i] = i < valid ? p[i] : (elem)0;
#pragma unroll
	for (int i = 0; i < 4; i++)
		r[i] = pack2(e[2 * i], e[2 * i + 1]);
}

/* A(m, k) and A(m, k + 1), zero outside A. */
static __device__ __forceinline__ u32 a_pair(const elem *A, i64 lda, int M, int K, int m, int k)
{
	if (m >= M || k >= K)
		return 0;
#if TRANS_A == 0
	if (k + 1 < K)
		return ld_32(A + (i64)m * lda + k); /* k even, lda % 8 == 0: 4-byte aligned */
	return A[(i64)m * lda + k];
#else
	return pack2(A[(i64)k * lda + m], k + 1 < K ? A[(i64)(k + 1) * lda + m] : (elem)0);
#endif
}

/*
 * One step's operands of a warp: w, B's fragments (TRANS_B=1: rows g and
 * g + 8 of each 16-row tile; 0: rows k and k + 8 of each 32-column group);
 * a, A's for each 8-row tile of A (TRANS_B=1: the 8 elements of k that the
 * lane's B holds; 0: the two pairs of the mma's b0, b1).  FULL: the step
 * lies inside K, and only N needs checks.
 */
struct step_regs {
	u32 w[GROUPS][2][4];
	u32 a[M_TILES][4];
};

template <bool FULL>
static __device__ __forceinline__ void load_step(step_regs &s, const elem *A, const elem *B, i64 lda,
						 i64 ldb, int M, int N, int K, int m0, int n_w, int k,
						 int lane, u64 policy)
{
	const int g = lane / 4, q = lane % 4;
#pragma unroll
	for (int gr = 0; gr < GROUPS; gr++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
#if TRANS_B
			/* rows past N read row N - 1: loaded, never stored */
			const int n = imin(n_w + gr * 16 + h * 8 + g, N - 1), kk = k + 8 * q;
			const elem *p = B + (i64)n * ldb + kk;
			if (FULL || kk + 8 <= K)
				ld_stream_16(s.w[gr][h], p, policy);
			else
				ld_part(s.w[gr][h], p, K - kk);
#else
			const int kk = k + h * 8 + g, n = n_w + gr * 32 + 8 * q;
			const elem *p = B + (i64)kk * ldb + n;
			if ((FULL || kk < K) && n + 8 <= N)
				ld_stream_16(s.w[gr][h], p, policy);
			else
				ld_part(s.w[gr][h], p, FULL || kk < K ? N - n : 0);
#endif
		}
#pragma unroll
	for (int mt = 0; mt < M_TILES; mt++) {
		const int m = m0 + mt * 8 + g;
#if TRANS_B
		const int kk = k + 8 * q;
#if TRANS_A == 0
		if (m < M && (FULL || kk + 8 <= K)) {
			ld_16(s.a[mt], A + (i64)m * lda + kk);
			continue;
		}
#endif
#pragma unroll
		for (int i = 0; i < 4; i++)
			s.a[mt][i] = a_pair(A, lda, M, K, m, kk + 2 * i);
#else
		s.a[mt][0] = a_pair(A, lda, M, K, m, k + 2 * q);
		s.a[mt][1] = a_pair(A, lda, M, K, m, k + 8 + 2 * q);
#endif
	}
}

/* acc += the step's products. */
static __device__ __forceinline__ void mma_step(float (&acc)[ROW_TILES][M_TILES][4], const step_regs &s)
{
#pragma unroll
	for (int gr = 0; gr < GROUPS; gr++) {
#if TRANS_B
		/* mma j: the lane's k 4 j .. 4 j + 3 of rows g (w[.][0]) and g + 8 (w[.][1]) */
#pragma unroll
		for (int j = 0; j < 2; j++) {
			const u32 a[4] = { s.w[gr][0][2 * j], s.w[gr][1][2 * j], s.w[gr][0][2 * j + 1],
					   s.w[gr][1][2 * j + 1] };
#pragma unroll
			for (int mt = 0; mt < M_TILES; mt++)
				mma_16816(acc[gr][mt], a, s.a[mt][2 * j], s.a[mt][2 * j + 1]);
		}
#else
		/* mma h: rows from blocks 2 h (0-7) and 2 h + 1 (8-15), k 0-7 then 8-15 */
		u32 t[2][4];
#pragma unroll
		for (int h = 0; h < 2; h++)
#pragma unroll
			for (int p = 0; p < 4; p++)
				t[h][p] = movmatrix_trans(s.w[gr][h][p]);
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const u32 a[4] = { t[0][2 * h], t[0][2 * h + 1], t[1][2 * h], t[1][2 * h + 1] };
#pragma unroll
			for (int mt = 0; mt < M_TILES; mt++)
				mma_16816(acc[gr * 2 + h][mt], a, s.a[mt][0], s.a[mt][1]);
		}
#endif
	}
}

/* --------------------------------------------------------------- epilogue */

/* Writes alpha * v + beta * C to C(m, n) (inside C; C read only when beta != 0). */
static __device__ __forceinline__ void store_c(elem *C, i64 ldc, int m, int n, float v, float alpha,
					       float beta)
{
	elem *p = C + (i64)m * ldc + n;
	float r = alpha * v;
	if (beta != 0.0f)
		r += beta * elem_to_float(*p);
	*p = float_to_elem(r);
}

/* ----------------------------------------------------------------- kernel */

extern "C" __global__ void __launch_bounds__(NTHREADS)
gemv_kernel(const unsigned short *A, const unsigned short *B, unsigned short *C,
	    int M, int N, int K, long long lda, long long ldb, long long ldc,
	    float alpha, float beta, int group_size, int split_k,
	    float *partials, int *tile_counters)
{
	extern __shared__ __align__(16) unsigned char smem[];
	float *sums = (float *)smem; /* [WARPS_K - 1][WARPS_N][the warp's accumulators][32] */
	int *flag = (int *)(smem + SMEM_BYTES - 16);
	(void)group_size;

	const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	const int warp_n = warp % WARPS_N, warp_k = warp / WARPS_N;

	const int num_pid_n = cdiv(N, BLOCK_N);
	const int pid = blockIdx.x, pid_m = pid / num_pid_n, pid_n = pid % num_pid_n;
	if (pid_m >= cdiv(M, BLOCK_M))
		return; /* only when the grid is larger than the contract says */
	const int m0 = pid_m * BLOCK_M, n0 = pid_n * BLOCK_N, n_w = n0 + warp_n * WARP_N;

	/* this split's steps, and those of them inside K (only the last step of K may not be) */
	if (split_k < 1)
		split_k = 1;
	const int steps = cdiv(K, KSTEP), per_split = cdiv(steps, split_k);
	const int s_begin = imin((int)blockIdx.z * per_split, steps);
	const int s_end = imin(s_begin + per_split, steps);
	const int s_full = imin(s_end, K / KSTEP);
	const u64 policy = evict_first_policy();

	float acc[ROW_TILES][M_TILES][4];
#pragma unroll
	for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
		for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[t][mt][e] = 0.0f;

	/*
	 * batches of STAGES steps: their loads out, then their mmas.  Those
	 * inside K load without checks of K; the last may be short, or hold
	 * the step that K ends in.
	 */
	const int batches = cdiv(s_end - s_begin, STAGES);
#pragma unroll 1
	for (int b = warp_k; b < batches; b += WARPS_K) {
		const int st = s_begin + b * STAGES, k = st * KSTEP;
		if (st + STAGES <= s_full) {
			step_regs s[STAGES];
#pragma unroll
			for (int i = 0; i < STAGES; i++)
				load_step<true>(s[i], A, B, lda, ldb, M, N, K, m0, n_w, k + i * KSTEP, lane,
						policy);
#pragma unroll
			for (int i = 0; i < STAGES; i++)
				mma_step(acc, s[i]);
		} else {
			/* once a split at most: a step at a time, in few registers */
#pragma unroll 1
			for (int i = 0; i < STAGES && st + i < s_end; i++) {
				step_regs s;
				load_step<false>(s, A, B, lda, ldb, M, N, K, m0, n_w, k + i * KSTEP, lane,
						 policy);
				mma_step(acc, s);
			}
		}
	}

	/* the warps along K add up in warp order, into warp_k 0's accumulators */
	constexpr int NACC = ROW_TILES * M_TILES * 4;
	if (WARPS_K > 1) {
		float *mine = sums + ((warp_k - 1) * WARPS_N + warp_n) * NACC * 32 + lane;
		if (warp_k > 0) {
#pragma unroll
			for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
				for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
					for (int e = 0; e < 4; e++)
						mine[((t * M_TILES + mt) * 4 + e) * 32] = acc[t][mt][e];
		}
		__syncthreads();
		if (warp_k == 0)
			for (int w = 1; w < WARPS_K; w++) {
				const float *theirs = sums + ((w - 1) * WARPS_N + warp_n) * NACC * 32 + lane;
#pragma unroll
				for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
					for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
						for (int e = 0; e < 4; e++)
							acc[t][mt][e] += theirs[((t * M_TILES + mt) * 4 + e) * 32];
			}
	}

	/* warp_k 0 holds the block's sums: to C, or to this split's partial */
	float *part = partials + (i64)blockIdx.z * M * N;
	if (warp_k == 0)
#pragma unroll
		for (int t = 0; t < ROW_TILES; t++)
#pragma unroll
			for (int half = 0; half < 2; half++) {
				const int n = n_w + acc_n(lane, t, half);
				if (n >= N)
					continue;
#pragma unroll
				for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
					for (int e = 0; e < 2; e++) {
						const int m = m0 + acc_m(lane, mt, e);
						if (m >= M)
							continue;
						const float v = acc[t][mt][2 * half + e];
						if (split_k == 1)
							store_c(C, ldc, m, n, v, alpha, beta);
						else
							part[(i64)m * N + n] = v;
					}
			}
	if (split_k == 1)
		return;

	/* publish this split's partial, then count the block in */
	__threadfence();
	__syncthreads();
	if (tid == 0)
		*flag = atomicAdd(&tile_counters[pid], 1) == split_k - 1;
	__syncthreads();
	if (!*flag)
		return;

	/* the last block: the partials in split order, eight splits' loads in flight at a time */
	__threadfence();
	const i64 split_stride = (i64)M * N;
	for (int idx = tid; idx < BLOCK_M * BLOCK_N; idx += NTHREADS) {
		const int m = m0 + idx / BLOCK_N, n = n0 + idx % BLOCK_N;
		if (m >= M || n >= N)
			continue;
		const float *p = partials + (i64)m * N + n;
		float sum = 0.0f;
		for (int s = 0; s < split_k; s += 8) {
			float v[8];
#pragma unroll
			for (int j = 0; j < 8; j++)
				v[j] = s + j < split_k ? ld_cg(p + (i64)(s + j) * split_stride) : 0.0f;
#pragma unroll
			for (int j = 0; j < 8; j++)
				sum += v[j];
		}
		store_c(C, ldc, m, n, sum, alpha, beta);
	}
	if (tid == 0)
		tile_counters[pid] = 0; /* ready for the next launch */
}
