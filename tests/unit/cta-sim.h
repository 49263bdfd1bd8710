/*
 * cta-sim.h - a kernel template's thread blocks run on the host, for
 * tests/unit/test-attention-sim.cc: every CUDA thread a fiber (ucontext),
 * run in a seeded random order until it reaches a barrier or a warp-wide
 * operation, with those operations done here as the PTX ISA defines them:
 * mma.sync m16n8k16 (fp32 accumulation), ldmatrix .x4 (with .trans),
 * shuffles, __syncthreads, __syncwarp, and cp.async with its commit groups.
 *
 * A template compiled with ATTENTION_HOST takes its PTX helpers from here
 * (and mma_16816 and pack_f2, which depend on the element type, from the
 * including file).  cp.async copies land either at once (COPY_EAGER: a slot
 * refilled while a warp still reads it shows) or only when the issuing
 * thread's cp.async.wait_group retires their group (COPY_LAZY, on shared
 * memory filled with NaN: a tile read before it is awaited shows).  Shared
 * memory accesses are checked for bounds and alignment.
 *
 * What this is not: a timing model, or a proof that no race is left (the
 * order is one random interleaving of whole fibers); the GPU tests decide.
 */
#ifndef KTUNE_CTA_SIM_H
#define KTUNE_CTA_SIM_H

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

/* AddressSanitizer follows a switch of stacks only when told (the CI's sanitizer build). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define SIM_ASAN 1
#else
#define SIM_ASAN 0
#endif

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n)

typedef unsigned int u32;

namespace sim {

struct dim {
	unsigned x, y, z;
};

enum copy_mode { COPY_EAGER, COPY_LAZY };

struct copy {
	unsigned char *dst;
	const unsigned char *src;
	int bytes; /* of src; the rest of the 16 are zeros */
};

struct fiber {
	ucontext_t uc;
	std::vector<char> stack;
	dim tid;
	bool done = false, blocked = false;
	const char *waits_on = "";             /* while blocked: what on (a deadlock's report) */
	long long wait_a = 0, wait_b = 0;
	std::vector<copy> open;                /* cp.async issued since the last commit */
	std::vector<std::vector<copy>> groups; /* committed, oldest first */
};

struct barrier {
	int count = 0;
	std::vector<int> waiters;
};

struct warp_slots {
	barrier bar;
	u32 u[32][8];
	float f[32];
};

/* A device buffer as the host sees it: [begin, end) may be read and written. */
struct region {
	const unsigned char *begin, *end;
};

struct block {
	dim idx, grid, threads;
	int n = 0, cur = -1;
	std::vector<fiber> fibers;
	std::vector<warp_slots> warps;
	barrier bar;
	std::vector<unsigned char> smem;
	ucontext_t sched;
	copy_mode mode = COPY_EAGER;
	uint64_t rng = 1;
	unsigned serial = 0; /* which run_block this is: extensions keep per-block state by it (wgmma-sim.h) */
	const std::function<void()> *body = nullptr;
	/* ASan's view of the scheduler's stack, and its fake stack while a fiber runs */
	const void *sched_bottom = nullptr;
	size_t sched_size = 0;
	void *sched_fake = nullptr;
};

static block *g;                     /* the block being run */
static unsigned blocks_run;         /* run_block calls so far: the next block's serial */
static std::vector<region> regions; /* global memory a kernel may touch */
static int failures;                /* bounds and alignment faults seen */
static bool slow_warpgroups;        /* run_block's slow warpgroup (below): on for the tests that ask */

static void fault(const char *what, long long a, long long b)
{
	if (failures++ < 10)
		fprintf(stderr, "sim: block (%u, %u, %u) thread %d: %s (%lld, %lld)\n", g->idx.x, g->idx.y, g->idx.z,
			g->cur, what, a, b);
}

static uint64_t next_random(void)
{
	uint64_t x = g->rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return g->rng = x;
}

static fiber &me(void)
{
	return g->fibers[g->cur];
}

/* From a fiber to the scheduler; `dying`: the fiber will not run again. */
static void to_scheduler(bool dying)
{
#if SIM_ASAN
	void *fake = nullptr;
	__sanitizer_start_switch_fiber(dying ? nullptr : &fake, g->sched_bottom, g->sched_size);
	swapcontext(&me().uc, &g->sched);
	__sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
	(void)dying;
	swapcontext(&me().uc, &g->sched);
#endif
}

static void yield(void)
{
	to_scheduler(false);
}

/* Now and then, give way to another fiber: the interleaving varies between arrivals. */
static void maybe_yield(void)
{
	if (next_random() % 8 == 0)
		yield();
}

static void wait(barrier &b, int expected)
{
	if (++b.count == expected) {
		b.count = 0;
		for (int w : b.waiters)
			g->fibers[w].blocked = false;
		b.waiters.clear();
		maybe_yield();
		return;
	}
	b.waiters.push_back(g->cur);
	me().blocked = true;
	me().waits_on = "barrier (arrived, expected)";
	me().wait_a = b.count;
	me().wait_b = expected;
	yield();
}

static int lane(void) { return (int)me().tid.x % 32; }
static warp_slots &warp(void) { return g->warps[me().tid.x / 32]; }

static void entry(void)
{
#if SIM_ASAN
	__sanitizer_finish_switch_fiber(nullptr, &g->sched_bottom, &g->sched_size);
#endif
	(*g->body)();
	me().done = true;
	to_scheduler(true);
}

/* Runs block idx of the grid to its end: every thread a fiber, one at a time in a seeded random order. */
static void run_block(dim idx, dim grid, int threads, size_t smem_bytes, copy_mode mode, uint64_t seed,
		      const std::function<void()> &body)
{
	block b;
	b.idx = idx;
	b.grid = grid;
	b.threads = { (unsigned)threads, 1, 1 };
	b.n = threads;
	b.fibers.resize((size_t)threads);
	b.warps.resize((size_t)(threads + 31) / 32);
	b.smem.assign(smem_bytes, mode == COPY_LAZY ? 0xff : 0); /* lazy: NaN until a copy lands */
	b.mode = mode;
	b.rng = seed * 2654435761u + (idx.x + 1) * 40503u + (idx.y + 1) * 977u + idx.z + 1;
	b.body = &body;
	b.serial = ++blocks_run;
	g = &b;
	for (int t = 0; t < threads; t++) {
		fiber &f = b.fibers[(size_t)t];
		f.tid = { (unsigned)t, 0, 0 };
		f.stack.resize(256 * 1024);
		getcontext(&f.uc);
		f.uc.uc_stack.ss_sp = f.stack.data();
		f.uc.uc_stack.ss_size = f.stack.size();
		f.uc.uc_link = &b.sched;
		makecontext(&f.uc, entry, 0);
	}
	/*
	 * slow_warpgroups: in half the blocks of 256 threads or more, one
	 * warpgroup runs slowly: picked, it gives way to another runnable
	 * thread 15 times in 16, so the others get far ahead of it, as a
	 * descheduled warpgroup would let them (a missing barrier between
	 * warpgroups shows).  On for the tests that ask (the wgmma forward's
	 * and backward's).  Their lanes run far apart too, which a warp's
	 * converged instructions do not: wgmma-sim.h's mbarrier waits are
	 * therefore a warp's (the forward deadlocked under it while each lane
	 * waited on its own: 2026-11-28, a simulator artefact).
	 */
	int slow = -1;
	if (slow_warpgroups && threads >= 256 && next_random() % 2)
		slow = (int)(next_random() % (uint64_t)(threads / 128)) * 128;
	std::vector<int> runnable, fast;
	for (;;) {
		runnable.clear();
		int done = 0;
		for (int t = 0; t < threads; t++) {
			const fiber &f = b.fibers[(size_t)t];
			done += f.done;
			if (!f.done && !f.blocked)
				runnable.push_back(t);
		}
		if (done == threads)
			break;
		if (runnable.empty()) {
			fprintf(stderr, "sim: block (%u, %u, %u): every live thread waits: deadlock\n", idx.x, idx.y,
				idx.z);
			/* what each live thread waits on, a line per run of threads waiting on the same */
			for (int t = 0, first = 0; t < threads; t++) {
				const fiber &f = b.fibers[(size_t)t];
				const fiber *nx = t + 1 < threads ? &b.fibers[(size_t)t + 1] : nullptr;
				if (nx && nx->done == f.done &&
				    (f.done || (!strcmp(nx->waits_on, f.waits_on) && nx->wait_a == f.wait_a &&
						nx->wait_b == f.wait_b)))
					continue;
				if (f.done)
					fprintf(stderr, "sim:   threads %d-%d: done\n", first, t);
				else
					fprintf(stderr, "sim:   threads %d-%d%s: wait on %s (%lld, %lld)\n", first,
						t, slow >= 0 && first >= slow && t < slow + 128 ? " (slow)" : "",
						f.waits_on, f.wait_a, f.wait_b);
				first = t + 1;
			}
			abort();
		}
		b.cur = runnable[next_random() % runnable.size()];
		if (slow >= 0 && b.cur >= slow && b.cur < slow + 128 && next_random() % 16) {
			fast.clear();
			for (int t : runnable)
				if (t < slow || t >= slow + 128)
					fast.push_back(t);
			if (!fast.empty())
				b.cur = fast[next_random() % fast.size()];
		}
		fiber &f = b.fibers[(size_t)b.cur];
#if SIM_ASAN
		__sanitizer_start_switch_fiber(&b.sched_fake, f.stack.data(), f.stack.size());
		swapcontext(&b.sched, &f.uc);
		__sanitizer_finish_switch_fiber(b.sched_fake, nullptr, nullptr);
#else
		swapcontext(&b.sched, &f.uc);
#endif
	}
	g = nullptr;
}

/* Runs body (the kernel call) as every thread of every block of the grid, block after block. */
static void launch(dim grid, int threads, size_t smem_bytes, copy_mode mode, uint64_t seed,
		   const std::function<void()> &body)
{
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++)
				run_block({ x, y, z }, grid, threads, smem_bytes, mode, seed, body);
}

/* A host buffer the kernel may read and write (cp.async sources, 16-byte stores). */
static void track(const void *p, size_t bytes)
{
	regions.push_back({ (const unsigned char *)p, (const unsigned char *)p + bytes });
}

static void untrack_all(void)
{
	regions.clear();
}

static bool in_global(const void *p, size_t bytes)
{
	const unsigned char *c = (const unsigned char *)p;
	for (const region &r : regions)
		if (c >= r.begin && c + bytes <= r.end)
			return true;
	return false;
}

static unsigned char *shared_at(u32 addr, u32 bytes, u32 align)
{
	if (addr % align || (size_t)addr + bytes > g->smem.size()) {
		fault("shared access out of bounds or misaligned", addr, bytes);
		static unsigned char sink[64];
		return sink;
	}
	return g->smem.data() + addr;
}

static void land(const copy &c)
{
	memcpy(c.dst, c.src, (size_t)c.bytes);
	memset(c.dst + c.bytes, 0, (size_t)(16 - c.bytes));
}

} /* namespace sim */

#define threadIdx (sim::me().tid)
#define blockIdx (sim::g->idx)
#define gridDim (sim::g->grid)

static inline void __syncthreads(void)
{
	sim::wait(sim::g->bar, sim::g->n);
}

static inline void __syncwarp(void)
{
	sim::wait(sim::warp().bar, 32);
}

/* --------------------------------------------- the templates' PTX helpers */

static inline unsigned char *dynamic_smem(void)
{
	return sim::g->smem.data();
}

static inline u32 smem_u32(const void *p)
{
	return (u32)((const unsigned char *)p - sim::g->smem.data());
}

static inline void cp_async_16(u32 dst, const void *src, int src_bytes)
{
	if (src_bytes < 0 || src_bytes > 16 || (src_bytes && ((uintptr_t)src % 16 || !sim::in_global(src, 16))))
		sim::fault("cp.async source out of bounds or misaligned", (long long)(uintptr_t)src, src_bytes);
	sim::copy c = { sim::shared_at(dst, 16, 16), (const unsigned char *)src, src_bytes };
	if (src_bytes && !sim::in_global(src, 16))
		c.bytes = 0;
	if (sim::g->mode == sim::COPY_EAGER)
		sim::land(c);
	else
		sim::me().open.push_back(c);
	sim::maybe_yield();
}

static inline void cp_async_commit(void)
{
	sim::me().groups.push_back(sim::me().open);
	sim::me().open.clear();
}

template <int N>
static inline void cp_async_wait(void)
{
	std::vector<std::vector<sim::copy>> &groups = sim::me().groups;
	while (groups.size() > (size_t)N) {
		for (const sim::copy &c : groups.front())
			sim::land(c);
		groups.erase(groups.begin());
	}
}

/*
 * ldmatrix .x4: lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i;
 * without .trans lane l gets row l/4, elements 2(l%4) and +1; with .trans,
 * column l/4 of rows 2(l%4) and +1.
 */
template <bool TRANS>
static inline void ldmatrix_x4(u32 r[4], u32 addr)
{
	sim::warp_slots &w = sim::warp();
	const int l = sim::lane();
	w.u[l][0] = addr;
	sim::shared_at(addr, 16, 16);
	sim::wait(w.bar, 32);
	for (int i = 0; i < 4; i++) {
		if (!TRANS) {
			memcpy(&r[i], sim::shared_at(w.u[8 * i + l / 4][0] + (u32)(l % 4) * 4, 4, 4), 4);
		} else {
			unsigned short lo, hi;
			memcpy(&lo, sim::shared_at(w.u[8 * i + 2 * (l % 4)][0] + (u32)(l / 4) * 2, 2, 2), 2);
			memcpy(&hi, sim::shared_at(w.u[8 * i + 2 * (l % 4) + 1][0] + (u32)(l / 4) * 2, 2, 2), 2);
			r[i] = (u32)lo | (u32)hi << 16;
		}
	}
	sim::wait(w.bar, 32);
}

static inline void st_shared_u32(u32 addr, u32 v)
{
	memcpy(sim::shared_at(addr, 4, 4), &v, 4);
	sim::maybe_yield();
}

static inline void copy_16_shared_to_global(void *dst, u32 src)
{
	if ((uintptr_t)dst % 16 || !sim::in_global(dst, 16)) {
		sim::fault("16-byte store out of bounds or misaligned", (long long)(uintptr_t)dst, 16);
		return;
	}
	memcpy(dst, sim::shared_at(src, 16, 16), 16);
}

static inline void store_u32(void *p, u32 v)
{
	if ((uintptr_t)p % 4 || !sim::in_global(p, 4)) {
		sim::fault("4-byte store out of bounds or misaligned", (long long)(uintptr_t)p, 4);
		return;
	}
	memcpy(p, &v, 4);
}

/* One thread runs at a time: an add is atomic; the order of a block's adds is the fibers'. */
static inline float atomicAdd(float *p, float v)
{
	if ((uintptr_t)p % 4 || !sim::in_global(p, 4)) {
		sim::fault("atomic add out of bounds or misaligned", (long long)(uintptr_t)p, 4);
		return 0;
	}
	float old = *p;
	*p = old + v;
	sim::maybe_yield();
	return old;
}

static inline float shfl_xor(float v, int mask)
{
	sim::warp_slots &w = sim::warp();
	const int l = sim::lane();
	w.f[l] = v;
	sim::wait(w.bar, 32);
	float r = w.f[l ^ mask];
	sim::wait(w.bar, 32);
	return r;
}

static inline float neg_inf(void)
{
	return -INFINITY;
}

static inline float exp2_approx(float x)
{
	return exp2f(x);
}

static inline float log2_approx(float x)
{
	return log2f(x);
}

/* ------------------------------------------------------------ element types */

namespace sim {

static inline float half_to_float(unsigned short h)
{
	int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
	float v = exp == 0 ? ldexpf((float)man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexpf((float)(man + 1024), exp - 25);
	return sign ? -v : v;
}

static inline unsigned short float_to_half(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000, man = x & 0x7fffff;
	int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
	if (((x >> 23) & 0xff) == 0xff)
		return (unsigned short)(sign | 0x7c00 | (man ? 0x200 : 0));
	if (exp >= 31)
		return (unsigned short)(sign | 0x7c00);
	if (exp <= 0) {
		if (exp < -10)
			return (unsigned short)sign;
		man |= 0x800000;
		uint32_t shift = (uint32_t)(14 - exp), half = 1u << (shift - 1);
		uint32_t v = man >> shift, rest = man & ((1u << shift) - 1);
		if (rest > half || (rest == half && (v & 1)))
			v++;
		return (unsigned short)(sign | v);
	}
	uint32_t v = ((uint32_t)exp << 10) | (man >> 13), rest = man & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (v & 1)))
		v++;
	return (unsigned short)(sign | v);
}

static inline float bf16_to_float(unsigned short h)
{
	uint32_t x = (uint32_t)h << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

static inline unsigned short float_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (unsigned short)((x >> 16) | 0x40);
	return (unsigned short)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static inline float to_float(unsigned short h, bool bf16)
{
	return bf16 ? bf16_to_float(h) : half_to_float(h);
}

static inline unsigned short from_float(float f, bool bf16)
{
	return bf16 ? float_to_bf16(f) : float_to_half(f);
}

/*
 * mma.sync m16n8k16 row.col, fp32 accumulation: A[r][c] is half c % 2 of
 * register (r / 8) + 2 (c / 8) of lane (r % 8) * 4 + (c % 8) / 2; B[k][n]
 * half k % 2 of register k / 8 of lane n * 4 + (k % 8) / 2; lane l holds
 * D rows l/4 and l/4 + 8, columns 2(l%4) and +1.
 */
static inline void mma(float d[4], const u32 a[4], u32 b0, u32 b1, bool bf16)
{
	warp_slots &w = warp();
	const int l = lane();
	for (int i = 0; i < 4; i++)
		w.u[l][i] = a[i];
	w.u[l][4] = b0;
	w.u[l][5] = b1;
	wait(w.bar, 32);
	auto half = [](u32 word, int hi) { return (unsigned short)(hi ? word >> 16 : word & 0xffff); };
	for (int e = 0; e < 4; e++) {
		const int row = l / 4 + 8 * (e / 2), col = 2 * (l % 4) + e % 2;
		float acc = d[e];
		for (int k = 0; k < 16; k++) {
			float x = to_float(half(w.u[(row % 8) * 4 + (k % 8) / 2][(row / 8) + 2 * (k / 8)], k % 2), bf16);
			float y = to_float(half(w.u[col * 4 + (k % 8) / 2][4 + k / 8], k % 2), bf16);
			acc += x * y; /* exact products of 16-bit values, summed in fp32 */
		}
		d[e] = acc;
	}
	wait(w.bar, 32);
}

/* lo and hi rounded to nearest even, lo in the low half (cvt.rn.{f16,bf16}x2.f32 d, hi, lo). */
static inline u32 pack(float lo, float hi, bool bf16)
{
	return (u32)from_float(lo, bf16) | (u32)from_float(hi, bf16) << 16;
}

} /* namespace sim */

#endif
