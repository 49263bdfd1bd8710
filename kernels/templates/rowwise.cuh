/*
 * rowwise.cuh - what the row-wise templates (softmax.cu, and the ones after it) share:
 * the rows of a [rows, cols] matrix held in registers, a sum or maximum
 * over a row, and the walk over rows.  Include it after prelude.cuh.
 *
 * A row belongs to a group of ROW_THREADS threads of one block (a block
 * holds THREADS / ROW_THREADS groups, one row each), or, with CLUSTER > 1,
 * to the ROW_THREADS = THREADS threads of each of the CLUSTER blocks of a
 * thread-block cluster, which reduce through distributed shared memory
 * (sm_90).  Thread `lane` of a group in block `rank` of its cluster holds
 * ITEMS vectors of VEC_W elements of the row, vector i at column
 *
 *     ((i * CLUSTER + rank) * ROW_THREADS + lane) * VEC_W
 *
 * so that each of a warp's loads reads consecutive memory.  ITEMS is sized
 * for COLS, the largest row the kernel takes (the key's cols): a row is
 * read from memory once and written once, whatever its length.
 *
 * Reductions give every thread of a row the same value, in the same order
 * on every run (deterministic), and double-buffer their shared memory so
 * that one barrier each is enough.  Every thread of a block must call them
 * the same number of times: the walk over rows is uniform across a block
 * and a cluster, and a thread past the last row works on an empty row.
 *
 * Tunables (beside prelude.cuh's DTYPE, ALIGNED, VEC, THREADS, CACHE):
 */
#ifndef KTUNE_ROWWISE_CUH
#define KTUNE_ROWWISE_CUH

#ifndef COLS
#define COLS 4096 /* the longest row (the key's cols): sizes the registers a thread holds */
#endif
#ifndef ROW_THREADS
#define ROW_THREADS 256 /* threads per row in a block (4 to THREADS, a power of two) */
#endif
#ifndef CLUSTER
#define CLUSTER 1 /* blocks per row (1, 2, 4, 8): a thread-block cluster; ROW_THREADS == THREADS */
#endif

static_assert(ROW_THREADS >= 4 && ROW_THREADS <= THREADS && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
	      "ROW_THREADS is a power of two from 4 to THREADS");
static_assert(CLUSTER == 1 || CLUSTER == 2 || CLUSTER == 4 || CLUSTER == 8, "CLUSTER is 1, 2, 4 or 8");
static_assert(CLUSTER == 1 || ROW_THREADS == THREADS, "a row split over a cluster takes whole blocks");

#define ROWS_PER_BLOCK (THREADS / ROW_THREADS)
#define ROW_SPAN (CLUSTER * ROW_THREADS * VEC_W) /* elements of a row per vector of each thread */
#define ITEMS ((COLS + ROW_SPAN - 1) / ROW_SPAN)  /* vectors a thread holds */
#define ROW_WARPS (ROW_THREADS >= 32 ? ROW_THREADS / 32 : 1)

#if CLUSTER > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_DIMS
#endif

/* A row of a thread's share: ITEMS vectors of VEC_W elements, in fp32. */
typedef float row_regs[ITEMS][VEC_W];

/* ------------------------------------------------------------ where a thread is */

struct row_place {
	int lane;  /* within its row's group */
	int group; /* its row's group within the block */
	int rank;  /* its block within the cluster */
};

static __device__ __forceinline__ row_place row_place_here(void)
{
	row_place p;
	p.lane = threadIdx.x % ROW_THREADS;
	p.group = threadIdx.x / ROW_THREADS;
#if CLUSTER > 1
	u32 r;
	asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	p.rank = (int)r;
#else
	p.rank = 0;
#endif
	return p;
}

/* The first row of this block's groups in the walk, and the walk's step. */
static __device__ __forceinline__ i64 rows_first(void)
{
	return (i64)(blockIdx.x / CLUSTER) * ROWS_PER_BLOCK;
}

static __device__ __forceinline__ i64 rows_step(void)
{
	return (i64)(gridDim.x / CLUSTER) * ROWS_PER_BLOCK;
}

/* Column of the first element of a thread's vector i. */
static __device__ __forceinline__ i64 item_col(const row_place &p, int i)
{
	return ((i64)(i * CLUSTER + p.rank) * ROW_THREADS + p.lane) * VEC_W;
}

/* ------------------------------------------------------------ loads and stores */

/* A thread's share of a row of `cols` elements (0: none); elements past the end read as `fill`. */
static __device__ __forceinline__ void row_load(const elem *row, i64 cols, const row_place &p, row_regs &v,
						float fill)
{
#pragma unroll
	for (int i = 0; i < ITEMS; i++) {
		const i64 c = item_col(p, i);
		if (c + VEC_W <= cols) {
			const vec x = load_vec(row + c);
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				v[i][j] = vec_get(x, j);
		} else {
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				v[i][j] = c + j < cols ? load_elem(row + c + j) : fill;
		}
	}
}

/* Stores a thread's share of a row of `cols` elements (0: none), rounded to elem. */
static __device__ __forceinline__ void row_store(elem *row, i64 cols, const row_place &p, const row_regs &v)
{
#pragma unroll
	for (int i = 0; i < ITEMS; i++) {
		const i64 c = item_col(p, i);
		if (c + VEC_W <= cols) {
			vec x;
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				vec_set(x, j, v[i][j]);
			store_vec(row + c, x);
		} else {
#pragma unroll
			for (int j = 0; j < VEC_W; j++)
				if (c + j < cols)
					store_elem(row + c + j, v[i][j]);
		}
	}
}

/* ------------------------------------------------------------ reductions */

struct op_sum {
	static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
	static __device__ __forceinline__ float identity(void) { return 0.0f; }
};

struct op_max {
	static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
	static __device__ __forceinline__ float identity(void) { return -__int_as_float(0x7f800000); }
};

#if CLUSTER > 1
/* All threads of every block of the cluster; release what was written, acquire what others wrote. */
static __device__ __forceinline__ void cluster_sync(void)
{
	asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::
			     : "memory");
}

/* The float at the same shared-memory place in block `rank` of the cluster. */
static __device__ __forceinline__ float cluster_load(const float *local, int rank)
{
	u32 addr = (u32)__cvta_generic_to_shared(local), remote;
	float v;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
	asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
	return v;
}
#endif

/*
 * The reduction of x over the thread's row: within the warp by shuffles,
 * across the row's warps through shared memory, across the cluster through
 * distributed shared memory.  `parity` alternates the buffers; start it at 0.
 */
template <class Op>
static __device__ __forceinline__ float row_reduce(float x, int &parity)
{
#pragma unroll
	for (int s = (ROW_THREADS < 32 ? ROW_THREADS : 32) / 2; s > 0; s >>= 1)
		x = Op::apply(x, __shfl_xor_sync(0xffffffffu, x, s));
#if ROW_THREADS > 32 || CLUSTER > 1
	__shared__ float warp_part[2][THREADS / 32];
	const int first = (threadIdx.x / ROW_THREADS) * ROW_WARPS;
	if (threadIdx.x % 32 == 0)
		warp_part[parity][threadIdx.x / 32] = x;
	__syncthreads();
	x = warp_part[parity][first];
#pragma unroll
	for (int w = 1; w < ROW_WARPS; w++)
		x = Op::apply(x, warp_part[parity][first + w]);
#if CLUSTER > 1
	__shared__ float block_part[2];
	if (threadIdx.x == 0)
		block_part[parity] = x;
	cluster_sync();
	x = cluster_load(&block_part[parity], 0);
#pragma unroll
	for (int r = 1; r < CLUSTER; r++)
		x = Op::apply(x, cluster_load(&block_part[parity], r));
#endif
	parity ^= 1;
#endif
	return x;
}

/* Before a block of a cluster exits: the others may still read its shared memory. */
static __device__ __forceinline__ void row_done(void)
{
#if CLUSTER > 1
	cluster_sync();
#endif
}

#endif
