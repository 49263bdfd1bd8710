/*
 * gemm.cu - ktune's tuned GEMM family: tensor cores through mma.sync, fragments
 * through ldmatrix, and a multistage cp.async pipeline (CUTLASS sm80 style).
 *
 * Computes, for a row-major C[M,N] and fp32 accumulation,
 *
 *     C = alpha * op(A) * op(B) + beta * C
 *
 * A, B and C hold f16 (DTYPE_BF16=0) or bf16 (DTYPE_BF16=1) values, passed as
 * their 16-bit patterns (unsigned short), so the file needs no header.
 *
 *     TRANS_A=0: A is [M,K], element (m,k) at A[m*lda + k]
 *     TRANS_A=1: A is [K,M], element (m,k) at A[k*lda + m]
 *     TRANS_B=0: B is [K,N], element (k,n) at B[k*ldb + n]
 *     TRANS_B=1: B is [N,K], element (k,n) at B[n*ldb + k]  (nn.Linear weights)
 *     C:                     element (m,n) at C[m*ldc + n]
 *
 * Launch:
 *     block = (WARPS_M * WARPS_N * 32, 1, 1)
 *     grid  = (ceil(M / BLOCK_M) * ceil(N / BLOCK_N), 1, split_k)
 *     dynamic shared memory = SMEM_BYTES = STAGES * (A_TILE + B_TILE) * 2 bytes,
 *         A_TILE = TRANS_A ? BLOCK_K * (BLOCK_M + 8) : BLOCK_M * (BLOCK_K + 8)
 *         B_TILE = TRANS_B ? BLOCK_N * (BLOCK_K + 8) : BLOCK_K * (BLOCK_N + 8)
 *     elements: every tile keeps its contiguous dimension padded by 8 elements
 *     (16 bytes), which makes each ldmatrix conflict-free.  No static shared
 *     memory is used.  Above 48 KiB the host raises the kernel's
 *     cudaFuncAttributeMaxDynamicSharedMemorySize.
 *
 * Arguments beyond the GEMM's own:
 *     group_size     rows of tiles per group in the grouped launch order (as
 *                    Triton's GROUP_SIZE_M); values < 1 act as 1
 *     split_k        blocks that share one tile's K range, = gridDim.z
 *     partials       split_k > 1: fp32 scratch [split_k][M][N]; else unused
 *     tile_counters  split_k > 1: int[ceil(M/BLOCK_M) * ceil(N/BLOCK_N)], all
 *                    zero on entry and left all zero on exit; else unused
 *
 * Split-K: block (tile, s) accumulates k-tiles [s*per_split, (s+1)*per_split)
 * of its tile (per_split = ceil(ceil(K/BLOCK_K) / split_k); a range may be
 * empty) and writes them to partials[s]; the block that arrives last at the
 * tile's counter sums the split_k partials in the order s = 0, 1, ... (so the
 * result does not depend on scheduling), applies alpha and beta, writes C and
 * resets the counter.
 *
 * READ_ONCE_A / READ_ONCE_B (set by the host when the key has one column /
 * one row of tiles) stream that operand through L2 as evict_first.
 *
 * Limits:
 *   - any M, N, K >= 1: all loads and stores are predicated, and elements
 *     outside the matrices are read as zero
 *   - ALIGNED=1 requires A, B and C 16-byte aligned and lda, ldb, ldc multiples
 *     of 8; ALIGNED=0 takes any pointers and strides, at a lower speed
 *   - beta == 0 never reads C (it may hold NaN)
 *   - the tile shape must satisfy the static_asserts below
 *   - sm_80 or newer (cp.async, ldmatrix, bf16 mma)
 */

/* ---------------------------------------------------------------- tunables */

#ifndef BLOCK_M
#define BLOCK_M 128 /* rows of C per block */
#endif
#ifndef BLOCK_N
#define BLOCK_N 128 /* columns of C per block */
#endif
#ifndef BLOCK_K
#define BLOCK_K 32 /* depth (along K) of one pipeline stage */
#endif
#ifndef WARPS_M
#define WARPS_M 2 /* warps along M; warp w owns rows (w / WARPS_N) * BLOCK_M / WARPS_M ... */
#endif
#ifndef WARPS_N
#define WARPS_N 2 /* warps along N; warp w owns columns (w % WARPS_N) * BLOCK_N / WARPS_N ... */
#endif
#ifndef STAGES
#define STAGES 4 /* shared-memory buffers in the cp.async pipeline, >= 2 */
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 0 /* element type: 0 = f16, 1 = bf16 */
#endif
#ifndef TRANS_A
#define TRANS_A 0 /* 0: A stored [M,K]; 1: A stored [K,M] */
#endif
#ifndef TRANS_B
#define TRANS_B 0 /* 0: B stored [K,N]; 1: B stored [N,K] */
#endif
#ifndef ALIGNED
#define ALIGNED 1 /* 1: 16-byte cp.async loads (host guarantees alignment); 0: element loads */
#endif
#ifndef READ_ONCE_A
#define READ_ONCE_A 0 /* 1: one column of tiles, each A element read by one block: stream it */
#endif
#ifndef READ_ONCE_B
#define READ_ONCE_B 0 /* 1: one row of tiles, each B element read by one block: stream it */
#endif

/* ---------------------------------------------------------- derived sizes */

#define NTHREADS (WARPS_M * WARPS_N * 32)
#define WARP_TILE_M (BLOCK_M / WARPS_M) /* rows of C per warp */
#define WARP_TILE_N (BLOCK_N / WARPS_N) /* columns of C per warp */
#define MMA_M (WARP_TILE_M / 16)        /* m16n8k16 tiles per warp along M */
#define MMA_N (WARP_TILE_N / 8)         /* m16n8k16 tiles per warp along N */

/*
 * Shared-memory tiles are [ROWS][COLS + 8] with COLS the dimension that is
 * contiguous in global memory; the stage buffers lie as
 * [A stage 0 .. STAGES-1][B stage 0 .. STAGES-1].
 */
#define A_ROWS (TRANS_A ? BLOCK_K : BLOCK_M)
#define A_COLS (TRANS_A ? BLOCK_M : BLOCK_K)
#define A_LD (A_COLS + 8)
#define A_TILE (A_ROWS * A_LD) /* elements */
#define B_ROWS (TRANS_B ? BLOCK_N : BLOCK_K)
#define B_COLS (TRANS_B ? BLOCK_K : BLOCK_N)
#define B_LD (B_COLS + 8)
#define B_TILE (B_ROWS * B_LD) /* elements */
#define SMEM_BYTES (STAGES * (A_TILE + B_TILE) * 2)

static_assert(BLOCK_M % (WARPS_M * 16) == 0, "a warp owns whole m16 mma tiles");
static_assert(BLOCK_N % (WARPS_N * 16) == 0, "a warp owns whole pairs of n8 mma tiles");
static_assert(BLOCK_K % 16 == 0, "a stage holds whole k16 mma steps");
static_assert(STAGES >= 2, "the pipeline needs at least two stages");
static_assert(DTYPE_BF16 == 0 || DTYPE_BF16 == 1, "DTYPE_BF16 is 0 or 1");
static_assert(TRANS_A == 0 || TRANS_A == 1, "TRANS_A is 0 or 1");
static_assert(TRANS_B == 0 || TRANS_B == 1, "TRANS_B is 0 or 1");
static_assert(ALIGNED == 0 || ALIGNED == 1, "ALIGNED is 0 or 1");

typedef unsigned short elem; /* one f16 or bf16 value, as its bit pattern */
typedef unsigned int u32;
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

/* The shared-state-space address of a pointer into shared memory. */
static __device__ __forceinline__ u32 smem_u32(const void *p)
{
	return (u32)__cvta_generic_to_shared(p);
}

#if ALIGNED
/*
 * Copies 16 bytes from global src to shared dst asynchronously: the first
 * src_bytes (0..16) from src, zeros for the rest.  Both 16-byte aligned.
 */
static __device__ __forceinline__ void cp_async_16(u32 dst, const void *src, int src_bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
		     :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

/*
 * The same, for an operand that only one block reads (READ_ONCE_*): it goes
 * through L2 as evict_first, so the stream neither pushes out what other
 * work keeps in L2 nor forces dirty lines back to memory while it runs.
 */
static __device__ __forceinline__ void cp_async_16_stream(u32 dst, const void *src, int src_bytes)
{
	asm volatile("{\n\t.reg .b64 policy;\n\t"
		     "createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n\t"
		     "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, policy;\n\t}\n"
		     :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
#endif

static __device__ __forceinline__ void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's committed groups are in flight. */
template <int N>
static __device__ __forceinline__ void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

#if !ALIGNED
/* Stores 16 bytes (w0 at the lowest address) to 16-byte aligned shared dst. */
static __device__ __forceinline__ void st_shared_16(u32 dst, u32 w0, u32 w1, u32 w2, u32 w3)
{
	asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n"
		     :: "r"(dst), "r"(w0), "r"(w1), "r"(w2), "r"(w3) : "memory");
}
#endif

/*
 * ldmatrix .x4: lanes 8i..8i+7 give the addresses of rows 0..7 of 8x8
 * matrix i (16 bytes each); r[i] receives this lane's part of matrix i:
 * without .trans, row lane/4, columns 2*(lane%4) and +1; with .trans, column
 * lane/4, rows 2*(lane%4) and +1 (the first in the low half in both cases).
 */
template <bool TRANS>
static __device__ __forceinline__ void ldmatrix_x4(u32 r[4], u32 addr)
{
	if (TRANS)
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
	else
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

/* d += a * b for one m16n8k16 tile (fragments as in the PTX ISA). */
static __device__ __forceinline__ void mma_16816(float d[4], const u32 a[4], const u32 b[2])
{
#if DTYPE_BF16
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
	    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/*
 * A load that bypasses L1 (.cg), so another block's recent writes are seen.
 * volatile keeps it after the fence and the counter; no memory clobber, so a
 * run of them is issued before the first result is used.
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
static __device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

/* Two elements in one word, lo at the lower address. */
static __device__ __forceinline__ u32 pack2(elem lo, elem hi) { return (u32)lo | (u32)hi << 16; }

/*
 * Triton's grouped order: consecutive pids walk down a group of group_size
 * tile rows before moving one tile column right, so blocks running together
 * share rows of A and columns of B in L2.
 */
static __device__ __forceinline__ void grouped_tile(int pid, int num_pid_m, int num_pid_n,
						    int group_size, int *pid_m, int *pid_n)
{
	group_size = imin(imax(group_size, 1), num_pid_m); /* > num_pid_m maps like num_pid_m */
	int num_pid_in_group = group_size * num_pid_n;
	int group_id = pid / num_pid_in_group;
	int first_pid_m = group_id * group_size;
	int group_size_m = imin(num_pid_m - first_pid_m, group_size);
	*pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m;
	*pid_n = (pid % num_pid_in_group) / group_size_m;
}

/*
 * ldmatrix.x4 addresses for the 16x16 block of A at (m, k) (m, k relative to
 * the block's tile): the element offset, within one A stage, of the row this
 * lane gives.  The four matrices must come out as the m16n8k16 A fragment:
 * a0 = (m 0-7, k 0-7), a1 = (m 8-15, k 0-7), a2 = (m 0-7, k 8-15),
 * a3 = (m 8-15, k 8-15), lane holding row m = lane/4, k = 2*(lane%4) and +1.
 */
static __device__ __forceinline__ int a_frag_offset(int lane, int m, int k)
{
#if TRANS_A == 0
	/* smem [m][k], no .trans: matrix i = lane/8 has rows m + (i%2)*8 + lane%8, so
	   row = m + lane%16, starting at k + (i/2)*8 = k + (lane/16)*8 */
	return (m + lane % 16) * A_LD + k + (lane / 16) * 8;
#else
	/* smem [k][m], .trans: matrix i = lane/8 is k rows k + (i/2)*8 + j (j = lane%8),
	   m columns m + (i%2)*8 ..+7; .trans hands lane the column m = lane/4 of it */
	int i = lane / 8, j = lane % 8;
	return (k + (i / 2) * 8 + j) * A_LD + m + (i % 2) * 8;
#endif
}

/*
 * ldmatrix.x4 addresses for the 16 (k) x 16 (n) block of B at (k, n): two n8
 * tiles at once.  The four matrices must come out as {b0, b1} of the n tile
 * at n, then {b0, b1} of the n tile at n + 8, where b0 = k 0-7 and b1 = k 8-15,
 * lane holding column n = lane/4, k = 2*(lane%4) and +1.
 */
static __device__ __forceinline__ int b_frag_offset(int lane, int k, int n)
{
	int i = lane / 8, j = lane % 8;
#if TRANS_B == 1
	/* smem [n][k], no .trans: matrix i is n rows n + (i/2)*8 + j, k columns
	   k + (i%2)*8 ..+7; lane receives row n = lane/4 of it */
	return (n + (i / 2) * 8 + j) * B_LD + k + (i % 2) * 8;
#else
	/* smem [k][n], .trans: matrix i is k rows k + (i%2)*8 + j, n columns
	   n + (i/2)*8 ..+7; .trans hands lane the column n = lane/4 of it */
	return (k + (i % 2) * 8 + j) * B_LD + n + (i / 2) * 8;
#endif
}

/* Row (within the warp tile) of acc[mi][ni][2*h + e]: c0,c1 at row lane/4, c2,c3 at +8. */
static __device__ __forceinline__ int acc_row(int lane, int mi, int h) { return mi * 16 + h * 8 + lane / 4; }

/* Column (within the warp tile) of acc[mi][ni][2*h + e]: 2*(lane%4) + e. */
static __device__ __forceinline__ int acc_col(int lane, int ni) { return ni * 8 + (lane % 4) * 2; }

/* ------------------------------------------------------------------- load */

/*
 * Copies one ROWS x COLS tile into shared memory at dst ([ROWS][COLS + 8]):
 * element (r, c) of the tile is src[(row0 + r) * ld + col0 + c] of a matrix
 * with `rows` x `cols` valid elements, zero outside it.  The tile is cut into
 * 8-element chunks along COLS; in each pass the NTHREADS threads take
 * ROWS_PER_PASS whole rows, thread tid the chunk (tid / CHUNKS_PER_ROW,
 * tid % CHUNKS_PER_ROW) of them.
 */
template <int ROWS, int COLS, bool STREAM>
static __device__ __forceinline__ void load_tile(u32 dst, const elem *src, i64 ld, int row0,
						 int col0, int rows, int cols, int tid)
{
	constexpr int CHUNKS_PER_ROW = COLS / 8;
	constexpr int ROWS_PER_PASS = NTHREADS / CHUNKS_PER_ROW;
	constexpr int PASSES = (ROWS + ROWS_PER_PASS - 1) / ROWS_PER_PASS;
	static_assert(COLS % 8 == 0 && NTHREADS % CHUNKS_PER_ROW == 0,
		      "a tile row is whole chunks, and the threads cover whole rows");

	const int r = tid / CHUNKS_PER_ROW, c = (tid % CHUNKS_PER_ROW) * 8;
	const int cols_valid = imin(imax(cols - (col0 + c), 0), 8); /* of this thread's chunks */
	const elem *s = src + (i64)(row0 + r) * ld + (col0 + c);
	const i64 pass_stride = (i64)ROWS_PER_PASS * ld;
	const u32 d = dst + (u32)(r * (COLS + 8) + c) * 2;
#pragma unroll
	for (int p = 0; p < PASSES; p++) {
		if (ROWS % ROWS_PER_PASS != 0 && r + p * ROWS_PER_PASS >= ROWS)
			break;
		int n = row0 + r + p * ROWS_PER_PASS < rows ? cols_valid : 0;
		u32 dp = d + (u32)(p * ROWS_PER_PASS * (COLS + 8)) * 2;
		const elem *sp = s + p * pass_stride;
#if ALIGNED
		if (STREAM)
			cp_async_16_stream(dp, n > 0 ? (const void *)sp : (const void *)src, n * 2);
		else
			cp_async_16(dp, n > 0 ? (const void *)sp : (const void *)src, n * 2);
#else
		elem e[8];
#pragma unroll
		for (int i = 0; i < 8; i++)
			e[i] = i < n ? sp[i] : (elem)0;
		st_shared_16(dp, pack2(e[0], e[1]), pack2(e[2], e[3]), pack2(e[4], e[5]), pack2(e[6], e[7]));
#endif
	}
}

/* Loads k-tile kt (A's columns / B's rows kt*BLOCK_K ...) of this block into stage slot. */
static __device__ __forceinline__ void load_stage(u32 a_smem, u32 b_smem, int slot, int kt,
						  const elem *A, const elem *B, i64 lda, i64 ldb,
						  int M, int N, int K, int m0, int n0, int tid)
{
	u32 a_dst = a_smem + (u32)(slot * A_TILE) * 2;
	u32 b_dst = b_smem + (u32)(slot * B_TILE) * 2;
	int k0 = kt * BLOCK_K;
#if TRANS_A == 0
	load_tile<BLOCK_M, BLOCK_K, READ_ONCE_A>(a_dst, A, lda, m0, k0, M, K, tid);
#else
	load_tile<BLOCK_K, BLOCK_M, READ_ONCE_A>(a_dst, A, lda, k0, m0, K, M, tid);
#endif
#if TRANS_B == 1
	load_tile<BLOCK_N, BLOCK_K, READ_ONCE_B>(b_dst, B, ldb, n0, k0, N, K, tid);
#else
	load_tile<BLOCK_K, BLOCK_N, READ_ONCE_B>(b_dst, B, ldb, k0, n0, K, N, tid);
#endif
}

/* -------------------------------------------------------------------- mma */

#define K_STEPS (BLOCK_K / 16) /* mma k-steps per stage */
static_assert(K_STEPS % 2 == 0, "fragments alternate between two buffers across stages");

/* This warp's A and B fragments for k-step ks (0, 16, ...) of the tiles in stage slot. */
static __device__ __forceinline__ void load_fragments(u32 (&a)[MMA_M][4], u32 (&b)[MMA_N][2],
						      u32 a_smem, u32 b_smem, int slot, int ks,
						      int warp_m, int warp_n, int lane)
{
	u32 a_stage = a_smem + (u32)(slot * A_TILE) * 2;
	u32 b_stage = b_smem + (u32)(slot * B_TILE) * 2;
	int wm = warp_m * WARP_TILE_M, wn = warp_n * WARP_TILE_N;
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++)
		ldmatrix_x4<TRANS_A == 1>(a[mi], a_stage + (u32)a_frag_offset(lane, wm + mi * 16, ks) * 2);
#pragma unroll
	for (int nj = 0; nj < MMA_N / 2; nj++) {
		u32 r[4];
		ldmatrix_x4<TRANS_B == 0>(r, b_stage + (u32)b_frag_offset(lane, ks, wn + nj * 16) * 2);
		b[2 * nj][0] = r[0];
		b[2 * nj][1] = r[1];
		b[2 * nj + 1][0] = r[2];
		b[2 * nj + 1][1] = r[3];
	}
}

/* acc += a * b over this warp's tile, one k-step. */
static __device__ __forceinline__ void mma_fragments(float (&acc)[MMA_M][MMA_N][4],
						     const u32 (&a)[MMA_M][4], const u32 (&b)[MMA_N][2])
{
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
		for (int ni = 0; ni < MMA_N; ni++)
			mma_16816(acc[mi][ni], a[mi], b[ni]);
}

/* --------------------------------------------------------------- epilogue */

/* alpha * v + beta * c, c read only when beta != 0. */
static __device__ __forceinline__ float blend(float v, const elem *c, float alpha, float beta)
{
	float r = alpha * v;
	if (beta != 0.0f)
		r += beta * elem_to_float(*c);
	return r;
}

/* Writes alpha * v + beta * C to C(row, col) and C(row, col + 1), those that are inside C. */
static __device__ __forceinline__ void store_c_pair(elem *C, i64 ldc, int M, int N, int row, int col,
						    float v0, float v1, float alpha, float beta)
{
	if (row >= M || col >= N)
		return;
	elem *p = C + (i64)row * ldc + col;
#if ALIGNED
	if (col + 1 < N) { /* col is even and ldc % 8 == 0: p is 4-byte aligned */
		float r0 = alpha * v0, r1 = alpha * v1;
		if (beta != 0.0f) {
			u32 old = *(const u32 *)p;
			r0 += beta * elem_to_float((elem)(old & 0xffff));
			r1 += beta * elem_to_float((elem)(old >> 16));
		}
		*(u32 *)p = pack2(float_to_elem(r0), float_to_elem(r1));
		return;
	}
#endif
	p[0] = float_to_elem(blend(v0, p, alpha, beta));
	if (col + 1 < N)
		p[1] = float_to_elem(blend(v1, p + 1, alpha, beta));
}

/*
 * Split-K: writes this block's partial tile, counts the block in at the
 * tile's counter, and if it is the last of the split_k, sums all partials in
 * the order s = 0, 1, ... into C and resets the counter.  flag is scratch
 * shared memory (the pipeline buffers, no longer in use).
 */
static __device__ __forceinline__ void epilogue_split_k(const float (&acc)[MMA_M][MMA_N][4], elem *C,
							i64 ldc, int M, int N, float alpha, float beta,
							int split_k, float *partials, int *counter,
							int m0, int n0, int warp_m, int warp_n,
							int lane, int tid, int *flag)
{
	const i64 split_stride = (i64)M * N;

	/* this block's partial: straight from the accumulators */
	float *mine = partials + (i64)blockIdx.z * split_stride;
	const int row0 = m0 + warp_m * WARP_TILE_M, col0 = n0 + warp_n * WARP_TILE_N;
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
		for (int ni = 0; ni < MMA_N; ni++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int row = row0 + acc_row(lane, mi, h), col = col0 + acc_col(lane, ni);
				if (row >= M)
					continue;
				float *p = mine + (i64)row * N + col;
				if (col < N)
					p[0] = acc[mi][ni][2 * h];
				if (col + 1 < N)
					p[1] = acc[mi][ni][2 * h + 1];
			}

	/* publish it, then count this block in */
	__threadfence();
	__syncthreads();
	if (tid == 0)
		*flag = atomicAdd(counter, 1) == split_k - 1;
	__syncthreads();
	if (!*flag)
		return;

	/*
	 * the last block: sum the partials in split order, pairs of columns per
	 * thread; loads go out eight splits at a time, so the sum costs a few
	 * L2 round trips instead of one per split
	 */
	__threadfence();
	constexpr int PAIRS_PER_ROW = BLOCK_N / 2;
#pragma unroll 2
	for (int idx = tid; idx < BLOCK_M * PAIRS_PER_ROW; idx += NTHREADS) {
		int row = m0 + idx / PAIRS_PER_ROW, col = n0 + (idx % PAIRS_PER_ROW) * 2;
		if (row >= M || col >= N)
			continue;
		const float *p = partials + (i64)row * N + col;
		const bool pair = col + 1 < N;
		float s0 = 0.0f, s1 = 0.0f;
		for (int s = 0; s < split_k; s += 8) {
			float v0[8], v1[8];
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const float *q = p + (i64)(s + j) * split_stride;
				v0[j] = s + j < split_k ? ld_cg(q) : 0.0f;
				v1[j] = s + j < split_k && pair ? ld_cg(q + 1) : 0.0f;
			}
#pragma unroll
			for (int j = 0; j < 8; j++) {
				s0 += v0[j];
				s1 += v1[j];
			}
		}
		store_c_pair(C, ldc, M, N, row, col, s0, s1, alpha, beta);
	}
	if (tid == 0)
		*counter = 0; /* ready for the next launch */
}

/* ----------------------------------------------------------------- kernel */

extern "C" __global__ void __launch_bounds__(WARPS_M * WARPS_N * 32)
gemm_kernel(const unsigned short *A, const unsigned short *B, unsigned short *C,
	    int M, int N, int K, long long lda, long long ldb, long long ldc,
	    float alpha, float beta, int group_size, int split_k,
	    float *partials, int *tile_counters)
{
	extern __shared__ __align__(16) unsigned char smem[];
	const u32 a_smem = smem_u32(smem);
	const u32 b_smem = a_smem + STAGES * A_TILE * 2;

	const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;

	/* this block's tile of C */
	const int num_pid_m = cdiv(M, BLOCK_M), num_pid_n = cdiv(N, BLOCK_N);
	const int pid = blockIdx.x;
	int pid_m, pid_n;
	grouped_tile(pid, num_pid_m, num_pid_n, group_size, &pid_m, &pid_n);
	if (pid_m >= num_pid_m || pid_n >= num_pid_n)
		return; /* only when the grid is larger than the contract says */
	const int m0 = pid_m * BLOCK_M, n0 = pid_n * BLOCK_N;

	/* this split's k-tiles: kt_begin .. kt_begin + nkt - 1 */
	if (split_k < 1)
		split_k = 1;
	const int k_tiles = cdiv(K, BLOCK_K);
	const int per_split = cdiv(k_tiles, split_k);
	const int kt_begin = imin((int)blockIdx.z * per_split, k_tiles);
	const int nkt = imin(per_split, k_tiles - kt_begin);

	float acc[MMA_M][MMA_N][4];
#pragma unroll
	for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
		for (int ni = 0; ni < MMA_N; ni++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mi][ni][e] = 0.0f;

	/* load: the prologue fills stages 0 .. STAGES-2, one commit group each */
#pragma unroll 1
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < nkt)
			load_stage(a_smem, b_smem, s, kt_begin + s, A, B, lda, ldb, M, N, K, m0, n0, tid);
		cp_async_commit();
	}

	/*
	 * main loop.  On entry to iteration kt, tile kt is in shared memory for
	 * everyone and this warp holds its fragments for k-step 0.  Each k-step
	 * loads the next k-step's fragments (the last one: tile kt+1's first)
	 * into the other buffer before its mma, so ldmatrix overlaps the tensor cores.
	 */
	u32 a_frag[2][MMA_M][4], b_frag[2][MMA_N][2];
	cp_async_wait<STAGES - 2>();
	__syncthreads();
	if (nkt > 0)
		load_fragments(a_frag[0], b_frag[0], a_smem, b_smem, 0, 0, warp_m, warp_n, lane);
	int slot = 0, next_slot = STAGES - 1; /* kt % STAGES and (kt + STAGES - 1) % STAGES */
#pragma unroll 1
	for (int kt = 0; kt < nkt; kt++) {
		/* the slot of tile kt-1 is refilled: every warp was done with it at the last barrier */
		const bool refill = kt + STAGES - 1 < nkt;
		const int next_kt = kt_begin + kt + STAGES - 1;
#pragma unroll
		for (int ks = 0; ks < K_STEPS; ks++) {
			int cur = ks & 1, nxt = cur ^ 1;
			if (refill && ks == 0)
				load_stage(a_smem, b_smem, next_slot, next_kt, A, B, lda, ldb, M, N, K, m0,
					   n0, tid);
			if (ks < K_STEPS - 1) {
				load_fragments(a_frag[nxt], b_frag[nxt], a_smem, b_smem, slot,
					       (ks + 1) * 16, warp_m, warp_n, lane);
			} else {
				cp_async_commit();           /* one group per iteration, maybe empty */
				cp_async_wait<STAGES - 2>(); /* tile kt+1 has landed ... */
				__syncthreads();             /* ... for everyone, and tile kt is read */
				slot = slot + 1 == STAGES ? 0 : slot + 1;
				next_slot = next_slot + 1 == STAGES ? 0 : next_slot + 1;
				if (kt + 1 < nkt)
					load_fragments(a_frag[nxt], b_frag[nxt], a_smem, b_smem, slot, 0,
						       warp_m, warp_n, lane);
			}
			mma_fragments(acc, a_frag[cur], b_frag[cur]);
		}
	}
	cp_async_wait<0>();

	/* epilogue */
	if (split_k == 1) {
		const int row0 = m0 + warp_m * WARP_TILE_M, col0 = n0 + warp_n * WARP_TILE_N;
#pragma unroll
		for (int mi = 0; mi < MMA_M; mi++)
#pragma unroll
			for (int ni = 0; ni < MMA_N; ni++)
#pragma unroll
				for (int h = 0; h < 2; h++)
					store_c_pair(C, ldc, M, N, row0 + acc_row(lane, mi, h),
						     col0 + acc_col(lane, ni), acc[mi][ni][2 * h],
						     acc[mi][ni][2 * h + 1], alpha, beta);
		return;
	}
	epilogue_split_k(acc, C, ldc, M, N, alpha, beta, split_k, partials, &tile_counters[pid],
			 m0, n0, warp_m, warp_n, lane, tid, (int *)smem);
}
