/*
 * wgmma-sim.h - the Hopper PTX of kernels/templates/attention_wgmma.cuh on
 * the host, for test-attention-sim.cc, on top of cta-sim.h's fibers:
 *
 *   - mbarriers: init, arrive, and waits on a phase's parity (PTX ISA
 *     "mbarrier": a fresh barrier is in phase 0; try_wait.parity(P)
 *     succeeds once the current phase's parity is not P).  A wait is a
 *     warp's, as a converged warp executes try_wait: once all its lanes
 *     have reached it, the barrier is looked at once for all of them (a
 *     lane cannot be a phase behind its warp's leader, which the kernels'
 *     one-arrive-per-warp barriers need), and a warp that has to wait is
 *     suspended on the barrier and resumes, having passed, when the phase
 *     completes, however late its lanes then run (as try_wait's suspended
 *     thread).  A warp that reaches a wait only after the barrier has gone
 *     two phases on waits for ever, as on the hardware; so does one whose
 *     lanes do not all reach the wait (or wait on different barriers: a
 *     fault);
 *   - cp.async.mbarrier.arrive.noinc: the arrive happens when the thread's
 *     earlier copies land.  With COPY_EAGER they landed when issued; with
 *     COPY_LAZY (shared memory starts as NaN) the copies and their arrive
 *     are held back until the thread is about to block on a barrier or
 *     waits for its copies (or, at random, at one of its successful waits),
 *     so a tile read before its full barrier says so shows;
 *   - named barriers (bar.sync id, count);
 *   - warpgroup MMA: wgmma.mma_async issued by the 128 threads of a
 *     warpgroup (each its own accumulators; the RS form's A from its
 *     registers), committed in groups, and computed only when a
 *     wgmma.wait_group retires the group, reading shared memory then
 *     through the descriptors as the PTX ISA lays out the 128-byte swizzled
 *     K-major and MN-major canonical layouts (decoded here, independently
 *     of the kernel's own swizzle helper).  A slot freed before the wait
 *     shows as a wrong product; an accumulator or A register touched while
 *     its wgmma is in flight is a fault (they are hashed at the issue and
 *     again before the product), and so is a change to the shared memory it
 *     reads (hashed when the warpgroup's last thread issues it);
 *   - setmaxnreg and the fences: nothing to do.
 *
 * Per-block state is kept by the block's serial number (cta-sim.h).
 */
#ifndef KTUNE_WGMMA_SIM_H
#define KTUNE_WGMMA_SIM_H

#include <map>

#include "cta-sim.h"

namespace sim {

struct mbarrier {
	int expected = 0, pending = 0;
	unsigned phase = 0; /* phases completed */
	std::vector<int> waiters;
};

struct wg_op {
	bool rs = false, trans_a = false, trans_b = false, bf16 = false;
	int n = 0, scale_d = 0;
	uint64_t da = 0, db = 0;
	float *d[128] = {};
	const u32 *a[128] = {};
	uint64_t d_hash[128] = {}, a_hash[128] = {};
	uint64_t smem_hash = 0; /* the shared-memory operands when the last thread issued */
	int issued = 0;
	bool done = false;
};

struct warpgroup_state {
	std::vector<wg_op> ops;
	std::vector<size_t> group_end; /* ops issued before each committed group's end */
	int ops_of[128] = {}, groups_of[128] = {};
	barrier bar;
};

struct held_copies {
	std::vector<copy> copies;
	u32 bar; /* the mbarrier to arrive on once they land */
};

/* A warp's lanes meeting at an mbarrier wait (mbar_wait): the barrier is looked at once they all have. */
struct warp_wait {
	int arrived = 0;
	u32 bar = 0, parity = 0;
	std::vector<int> lanes; /* those arrived, blocked until the last decides */
};

struct hopper_state {
	unsigned serial = 0;
	std::map<u32, mbarrier> bars;
	std::vector<warp_wait> warp_waits;
	std::map<u32, barrier> named;
	std::vector<warpgroup_state> wgs;
	std::vector<std::vector<held_copies>> held; /* per thread, oldest first */
};

static hopper_state hopper;

/* This block's state, fresh for each block. */
static hopper_state &hop(void)
{
	if (hopper.serial != g->serial) {
		hopper = hopper_state();
		hopper.serial = g->serial;
		hopper.wgs.resize((size_t)(g->n + 127) / 128);
		hopper.warp_waits.resize((size_t)(g->n + 31) / 32);
		hopper.held.resize((size_t)g->n);
	}
	return hopper;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
	const unsigned char *c = (const unsigned char *)p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 1099511628211ull;
	return h;
}

static mbarrier *mbar_at(u32 addr)
{
	shared_at(addr, 8, 8);
	std::map<u32, mbarrier>::iterator it = hop().bars.find(addr);
	if (it == hop().bars.end()) {
		fault("mbarrier used before its init", addr, 0);
		return nullptr;
	}
	return &it->second;
}

static void mbar_do_arrive(u32 addr)
{
	mbarrier *b = mbar_at(addr);
	if (!b)
		return;
	if (--b->pending > 0)
		return;
	if (b->pending < 0) {
		fault("mbarrier: more arrivals than expected", addr, b->pending);
		return;
	}
	b->phase++;
	b->pending = b->expected;
	for (int w : b->waiters)
		g->fibers[(size_t)w].blocked = false;
	b->waiters.clear();
}

/* Lands the oldest `count` of thread t's held-back copies and does their arrives. */
static void land_held_of(int t, size_t count)
{
	std::vector<held_copies> &q = hop().held[(size_t)t];
	for (size_t i = 0; i < count && !q.empty(); i++) {
		held_copies h = q.front();
		q.erase(q.begin());
		for (const copy &c : h.copies)
			land(c);
		mbar_do_arrive(h.bar);
	}
}

/* The same for the current thread. */
static void land_held(size_t count)
{
	land_held_of(g->cur, count);
}

/* ------------------------------------------------------------ wgmma */

static warpgroup_state &wg(void)
{
	return hop().wgs[me().tid.x / 128];
}

static int wg_thread(void)
{
	return (int)(me().tid.x % 128);
}

/*
 * The 16-bit element (mn, k) of a wgmma operand in shared memory, from its
 * descriptor, in the canonical layouts of the 128-byte swizzle (PTX ISA,
 * "Shared Memory Matrix Layout"; CUTLASS writes them as Sw<3,4,3> o
 * ((8,m),(T,2k)):((8T,SBO),(1,T)) for K-major and Sw<3,4,3> o
 * ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) for MN-major, T = 8 elements):
 *   K-major:  start + (mn % 8) 128 + (mn / 8) SBO + 2 k                 (k < 16)
 *   MN-major: start + 2 (mn % 64) + (mn / 64) LBO + (k % 8) 128 + (k / 8) SBO
 * then the swizzle on the byte address: bits 4-6 ^= bits 7-9.
 */
static float desc_elem(uint64_t desc, bool mn_major, int mn, int k, bool bf16)
{
	const u32 start = (u32)(desc & 0x3fff) << 4, lbo = (u32)((desc >> 16) & 0x3fff) << 4;
	const u32 sbo = (u32)((desc >> 32) & 0x3fff) << 4;
	if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0) {
		fault("wgmma descriptor: not the 128-byte swizzle with base offset 0", (long long)(desc >> 49), 0);
		return NAN;
	}
	u32 addr = mn_major ? start + 2 * (u32)(mn % 64) + (u32)(mn / 64) * lbo + (u32)(k % 8) * 128 + (u32)(k / 8) * sbo
			    : start + (u32)(mn % 8) * 128 + (u32)(mn / 8) * sbo + 2 * (u32)k;
	addr ^= ((addr >> 7) & 7) << 4;
	unsigned short h;
	memcpy(&h, shared_at(addr, 2, 2), 2);
	return to_float(h, bf16);
}

/*
 * One wgmma m64nNk16 of a warpgroup, computed: D (fp32, thread t's d[4j + e]
 * at row 16 (t / 32) + (t % 32) / 4 + 8 (e / 2), column 8j + 2 (t % 4) + e % 2)
 * = A B + (scale_d ? D : 0), the products of 16-bit values exact and summed
 * in fp32 in k order.  A from shared memory (K-major) or, RS, from the
 * threads' registers (a[i] of thread t: row 16 (t / 32) + (t % 32) / 4 +
 * 8 (i % 2), columns 2 (t % 4) + 8 (i / 2) and +1, the first in the low half).
 */
/* The operands an operation reads from shared memory (A unless RS, and B), and their hash. */
static uint64_t smem_operands(const wg_op &op, float (&A)[64][16], float (&B)[16][256])
{
	for (int m = 0; m < 64; m++)
		for (int k = 0; k < 16; k++)
			A[m][k] = op.rs ? 0 : desc_elem(op.da, op.trans_a, m, k, op.bf16);
	for (int k = 0; k < 16; k++)
		for (int n = 0; n < op.n; n++)
			B[k][n] = desc_elem(op.db, op.trans_b, n, k, op.bf16);
	uint64_t h = hash_bytes(A, sizeof(A));
	for (int k = 0; k < 16; k++)
		h = h * 31 + hash_bytes(B[k], sizeof(float) * (size_t)op.n);
	return h;
}

static void wgmma_execute(warpgroup_state &w, size_t index)
{
	static float A[64][16], B[16][256];
	wg_op &op = w.ops[index];
	for (int t = 0; t < 128; t++) {
		if (hash_bytes(op.d[t], (size_t)op.n / 2 * 4) != op.d_hash[t])
			fault("an accumulator of an in-flight wgmma was touched before its wait", t, op.n);
		if (op.rs && hash_bytes(op.a[t], 16) != op.a_hash[t])
			fault("an A register of an in-flight wgmma was touched before its wait", t, 0);
	}
	/* the hardware may read them any time from the issue to the wait: they must not change in between */
	if (smem_operands(op, A, B) != op.smem_hash)
		fault("shared memory read by an in-flight wgmma changed before its wait", (long long)index, op.n);
	if (op.rs)
		for (int t = 0; t < 128; t++)
			for (int i = 0; i < 4; i++)
				for (int h = 0; h < 2; h++) {
					const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (i % 2), col = 2 * (t % 4) + 8 * (i / 2) + h;
					A[row][col] = to_float((unsigned short)(h ? op.a[t][i] >> 16 : op.a[t][i] & 0xffff), op.bf16);
				}
	for (int t = 0; t < 128; t++)
		for (int j = 0; j < op.n / 8; j++)
			for (int e = 0; e < 4; e++) {
				const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (e / 2), col = 8 * j + 2 * (t % 4) + e % 2;
				float acc = op.scale_d ? op.d[t][4 * j + e] : 0.0f;
				for (int k = 0; k < 16; k++)
					acc += A[row][k] * B[k][col];
				op.d[t][4 * j + e] = acc;
			}
	op.done = true;
	/* the later operations in flight on the same accumulators now expect these values */
	for (size_t later = index + 1; later < w.ops.size(); later++)
		for (int t = 0; t < 128; t++)
			if (w.ops[later].d[t] == op.d[t])
				w.ops[later].d_hash[t] = hash_bytes(op.d[t], (size_t)op.n / 2 * 4);
}

/*
 * A thread's part of one wgmma.mma_async: its accumulators d (n / 2 floats)
 * and, RS, its A registers a[0..3]; trans_a: A from shared memory MN-major.
 */
static void wgmma_issue(float *d, int n, const u32 *a, uint64_t da, uint64_t db, int scale_d, bool trans_b, bool bf16,
			bool trans_a = false)
{
	warpgroup_state &w = wg();
	const int t = wg_thread();
	const size_t i = (size_t)w.ops_of[t]++;
	if (i == w.ops.size()) {
		w.ops.emplace_back();
		wg_op &op = w.ops.back();
		op.rs = a != nullptr;
		op.trans_a = trans_a;
		op.trans_b = trans_b;
		op.bf16 = bf16;
		op.n = n;
		op.da = da;
		op.db = db;
		op.scale_d = scale_d;
	}
	wg_op &op = w.ops[i];
	if (op.rs != (a != nullptr) || op.n != n || op.da != da || op.db != db || op.scale_d != scale_d ||
	    op.trans_b != trans_b || op.trans_a != trans_a)
		fault("wgmma: the warpgroup's threads issued different operations", (long long)i, t);
	op.d[t] = d;
	op.a[t] = a;
	op.d_hash[t] = hash_bytes(d, (size_t)n / 2 * 4);
	op.a_hash[t] = a ? hash_bytes(a, 16) : 0;
	if (++op.issued == 128) {
		static float A[64][16], B[16][256];
		op.smem_hash = smem_operands(op, A, B);
	}
	maybe_yield();
}

} /* namespace sim */

/* --------------------------------------------- attention_wgmma.cuh's helpers */

static inline int warp_uniform(int v)
{
	return v;
}

static inline void trap(void)
{
	sim::fault("trap", 0, 0);
	abort();
}

static inline u32 dynamic_smem_size(void)
{
	return (u32)sim::g->smem.size();
}

static inline void named_barrier(u32 id, u32 count)
{
	sim::wait(sim::hop().named[id], (int)count);
}

static inline void mbar_init(u32 bar, u32 count)
{
	sim::shared_at(bar, 8, 8);
	sim::mbarrier &b = sim::hop().bars[bar];
	b.expected = b.pending = (int)count;
	b.phase = 0;
	b.waiters.clear();
}

static inline void mbar_init_fence(void)
{
}

static inline void mbar_arrive(u32 bar)
{
	sim::mbar_do_arrive(bar);
	sim::maybe_yield();
}

/*
 * Blocks until the phase of this parity has completed, as its warp: each
 * lane waits for the rest; the last looks at the barrier for all of them.
 * Before the warp blocks, its lanes' held-back copies land (their arrives
 * may be what it waits for, and a real thread's copies land by
 * themselves); after a wait that succeeds, one of a lane's may land, at
 * random.  A suspended warp's lanes resume, having passed, when the phase
 * completes (mbar_do_arrive), whenever each of them runs next.
 */
static inline void mbar_wait(u32 bar, u32 parity)
{
	sim::mbarrier *b = sim::mbar_at(bar);
	if (!b)
		return;
	const int me = sim::g->cur, warp = me / 32, lanes = sim::g->n - 32 * warp < 32 ? sim::g->n - 32 * warp : 32;
	sim::warp_wait &ww = sim::hop().warp_waits[(size_t)warp];
	if (ww.arrived && (ww.bar != bar || ww.parity != parity))
		sim::fault("mbarrier wait: the lanes of a warp wait on different barriers or parities", bar, parity);
	ww.bar = bar;
	ww.parity = parity;
	if (++ww.arrived < lanes) {
		ww.lanes.push_back(me);
		sim::me().blocked = true;
		sim::me().waits_on = "mbarrier wait: the rest of its warp (address, parity)";
		sim::me().wait_a = bar;
		sim::me().wait_b = parity;
		sim::yield();
		return; /* the warp passed, or its phase completed */
	}
	std::vector<int> warp_lanes;
	warp_lanes.swap(ww.lanes);
	ww.arrived = 0;
	for (;;) {
		if ((b->phase & 1) != parity) {
			for (int t : warp_lanes) {
				sim::g->fibers[(size_t)t].blocked = false;
				if (sim::next_random() % 4 == 0)
					sim::land_held_of(t, 1);
			}
			if (sim::next_random() % 4 == 0)
				sim::land_held(1);
			sim::maybe_yield();
			return;
		}
		bool landed = !sim::hop().held[(size_t)me].empty();
		sim::land_held((size_t)-1);
		for (int t : warp_lanes) {
			landed = landed || !sim::hop().held[(size_t)t].empty();
			sim::land_held_of(t, (size_t)-1);
		}
		if (!landed)
			break;
	}
	warp_lanes.push_back(me);
	for (int t : warp_lanes) {
		sim::fiber &f = sim::g->fibers[(size_t)t];
		b->waiters.push_back(t);
		f.blocked = true;
		f.waits_on = "mbarrier (address, phases completed); parity";
		f.wait_a = bar;
		f.wait_b = (long long)b->phase * 10 + parity;
	}
	sim::yield();
}

static inline void cp_async_arrive_noinc(u32 bar)
{
	if (sim::g->mode == sim::COPY_EAGER) {
		sim::mbar_do_arrive(bar);
	} else {
		sim::hop().held[(size_t)sim::g->cur].push_back({ sim::me().open, bar });
		sim::me().open.clear();
	}
	sim::maybe_yield();
}

static inline void cp_async_wait_all(void)
{
	cp_async_commit();
	cp_async_wait<0>();
	sim::land_held((size_t)-1);
}

static inline void fence_proxy_async(void)
{
}

template <int N>
static inline void regs_release(void)
{
}

template <int N>
static inline void regs_claim(void)
{
}

static inline void wgmma_fence(void)
{
}

static inline void wgmma_commit(void)
{
	sim::warpgroup_state &w = sim::wg();
	const int t = sim::wg_thread();
	const size_t gi = (size_t)w.groups_of[t]++;
	if (gi == w.group_end.size())
		w.group_end.push_back((size_t)w.ops_of[t]);
	else if (w.group_end[gi] != (size_t)w.ops_of[t])
		sim::fault("wgmma.commit_group: the warpgroup's threads committed different groups", (long long)gi, t);
}

/*
 * Every thread of the warpgroup arrives; the groups older than the newest N
 * are computed (once), in order; then all go on.
 */
template <int N>
static inline void wgmma_wait(void)
{
	sim::warpgroup_state &w = sim::wg();
	const int t = sim::wg_thread();
	sim::wait(w.bar, 128);
	const int upto = w.groups_of[t] - N;
	const size_t end = upto > 0 ? w.group_end[(size_t)upto - 1] : 0;
	for (size_t i = 0; i < end; i++)
		if (!w.ops[i].done) {
			if (w.ops[i].issued != 128)
				sim::fault("wgmma: an operation not issued by every thread", (long long)i, w.ops[i].issued);
			sim::wgmma_execute(w, i);
		}
	sim::wait(w.bar, 128);
}

template <int N>
static inline void fence_regs(float (&)[N])
{
}

template <int N>
static inline void fence_regs(u32 (&)[N])
{
}

#endif
