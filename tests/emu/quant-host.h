/*
 * quant-host.h - quant.cuh's PTX functions emulated on the host, for
 * quant-emu.cc (which quant.cuh includes in their place when
 * KTUNE_QUANT_HOST names this file): what each instruction does, as the PTX
 * ISA says, in plain C++ over the emulation's threads and exchanges.
 */
static float to_float(elem x)
{
	return half_to_float(x, DTYPE == 1);
}

static elem from_float(float f)
{
	return float_to_half(f, DTYPE == 1);
}

static u32 pack_pair(float lo, float hi)
{
	return (u32)from_float(lo) | (u32)from_float(hi) << 16;
}

static u64 evict_first_policy(void)
{
	return 0;
}

template <int N>
static void ld_words(u32 (&r)[N], const void *p)
{
	if ((uintptr_t)p % (4 * N)) {
		fprintf(stderr, "misaligned %d-word load at %p\n", N, p);
		abort();
	}
	memcpy(r, p, sizeof(r));
}

template <int N>
static void ld_words_stream(u32 (&r)[N], const void *p, u64 policy)
{
	(void)policy;
	ld_words<N>(r, p);
}

/* Shared addresses: offsets from a static base (the __shared__ arrays are static here too). */
static char smem_base;

static u32 smem_u32(const void *p)
{
	return (u32)(int32_t)((const char *)p - &smem_base);
}

static char *smem_ptr(u32 a)
{
	return &smem_base + (int32_t)a;
}

template <int BYTES>
static void cp_async(u32 dst, const void *src, int src_bytes)
{
	if (src_bytes < 0 || src_bytes > BYTES || dst % BYTES || (src_bytes && (uintptr_t)src % BYTES)) {
		fprintf(stderr, "bad cp.async of %d bytes (%d read) to %#x from %p\n", BYTES, src_bytes, dst, src);
		abort();
	}
	cur->open_group.push_back({ smem_ptr(dst), (const char *)src, BYTES, src_bytes });
}

static void cp_async_16_policy(u32 dst, const void *src, int src_bytes, u64 policy)
{
	(void)policy;
	cp_async<16>(dst, src, src_bytes);
}

static void cp_async_commit(void)
{
	cur->groups.push_back(cur->open_group);
	cur->open_group.clear();
}

template <int N>
static void cp_async_wait(void)
{
	while (cur->groups.size() > N) {
		for (const copy &c : cur->groups.front()) {
			memcpy(c.dst, c.src, (size_t)c.src_bytes);
			memset(c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
		}
		cur->groups.erase(cur->groups.begin());
	}
}

/* Lane l gives the row address of matrix l / 8 (row l % 8); r[i] = row lane/4, columns 2 (lane%4), +1 of matrix i. */
static void ldmatrix_x4(u32 r[4], u32 addr)
{
	const int w = my_warp(), lane = my_lane();
	if (addr % 16) {
		fprintf(stderr, "ldmatrix row address %#x not 16-byte aligned\n", addr);
		abort();
	}
	lane_slot(*x)[32] = exchange_next();
	x[w][lane].v[0] = addr;
	warp_sync();
	for (int i = 0; i < 4; i++) {
		const char *row = smem_ptr((u32)x[w][8 * i + lane / 4].v[0]);
		memcpy(&r[i], row + 4 * (lane % 4), 4);
	}
}

/*
 * m16n8k16, A row-major, B column-major, as the PTX ISA lays out the
 * fragments (g = lane / 4, t = lane % 4): a[0] = A[g][2t, 2t+1], a[1] =
 * A[g+8][2t, 2t+1], a[2] = A[g][2t+8, +9], a[3] = A[g+8][2t+8, +9];
 * b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, +9][g]; d[0, 1] = D[g][2t, 2t+1],
 * d[2, 3] = D[g+8][2t, 2t+1].  Products summed in fp32 in k order.
 */
static void mma_16816(float d[4], const u32 a[4], const u32 b[2])
{
	const int w = my_warp(), lane = my_lane();
	lane_slot(*x)[32] = exchange_next();
	for (int i = 0; i < 4; i++)
		x[w][lane].v[i] = a[i];
	x[w][lane].v[4] = b[0];
	x[w][lane].v[5] = b[1];
	warp_sync();
	float A[16][16], B[16][8];
	for (int l = 0; l < 32; l++) {
		const int g = l / 4, t = l % 4;
		for (int e = 0; e < 2; e++) {
			A[g][2 * t + e] = to_float((elem)(x[w][l].v[0] >> (16 * e)));
			A[g + 8][2 * t + e] = to_float((elem)(x[w][l].v[1] >> (16 * e)));
			A[g][2 * t + 8 + e] = to_float((elem)(x[w][l].v[2] >> (16 * e)));
			A[g + 8][2 * t + 8 + e] = to_float((elem)(x[w][l].v[3] >> (16 * e)));
			B[2 * t + e][g] = to_float((elem)(x[w][l].v[4] >> (16 * e)));
			B[2 * t + 8 + e][g] = to_float((elem)(x[w][l].v[5] >> (16 * e)));
		}
	}
	const int g = lane / 4, t = lane % 4;
	for (int i = 0; i < 4; i++) {
		const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
		float s = d[i];
		for (int k = 0; k < 16; k++)
			s += A[row][k] * B[k][col];
		d[i] = s;
	}
}

/* x - y on two packed values of the element type, each rounded to nearest. */
static u32 sub_pair(u32 x, u32 y)
{
	u32 r = 0;
	for (int h = 0; h < 2; h++)
		r |= (u32)from_float(to_float((elem)(x >> (16 * h))) - to_float((elem)(y >> (16 * h)))) << (16 * h);
	return r;
}
