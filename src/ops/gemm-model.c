/*
 * gemm-model.c - the analytic time model of the GEMM families (gemm-model.h).
 *
 * Units: microseconds, bytes and FLOPs; rates per SM in FLOPs or bytes per
 * microsecond.  The model is a roofline per SM:
 *
 *   time = launch + max(compute on the busiest SM, DRAM bytes / bandwidth)
 *          + what does not overlap (pipeline fill and C stores between waves,
 *            the split-K reduction)
 *
 * where the compute rate of a config is the lowest of its family's tensor
 * rate (less for small warp tiles or too few warps), what L2 can feed its
 * tiles (bytes per FLOP fall as tiles grow), and what its bytes in flight
 * fetch against memory latency (Little's law: the stages of an aligned
 * pipeline, one chunk a thread for the element loads of the unaligned
 * variant).  The figures below were fitted to the H100 sweeps: the
 * mma.sync-only sweep of ddd1c33 (bench/results/h100.md then) and the
 * shipped sweep with both families (bench/results/h100.csv); docs/gemm.md
 * gives the fit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gemm-model.h"
#include "ops/gemm.h"

/* Figures of an arch, per SM, from its reference GPU (an H100 for sm_90). */
struct arch_figures {
	const char *arch;   /* prefix: "sm_90" also matches "sm_90a" */
	double mma_rate;    /* mma.sync FLOPs/us per SM, sustained on the best tile */
	double wgmma_rate;  /* wgmma FLOPs/us per SM; 0: no wgmma */
	double mma_peak;    /* above anything an mma.sync kernel reaches: its bound's rate */
	double peak_rate;   /* above anything a wgmma kernel reaches: its bound's rate */
	double l2_rate;     /* bytes/us per SM that L2 feeds to shared memory */
	double mem_gbps;    /* DRAM bandwidth of the reference GPU */
	int ref_sms;        /* SMs of the reference GPU */
	int smem_sm;        /* shared memory per SM, bytes */
};

static const struct arch_figures archs[] = {
	/*
	 * H100 SXM: wgmma 128x256 tiles sustain 6.6e6 (871 TFLOP/s in the main
	 * loop, 4096x4096x14336 against 4096^3); mma.sync 128x256 3.37e6 (the
	 * same pair in the mma.sync-only sweep); L2 about 10.5 TB/s; a copy
	 * reaches 3.0 TB/s.  The bounds: 8.3e6 is 1096 TFLOP/s, above the
	 * dense peak at the highest clock (1070); mma.sync never passed 425
	 * TFLOP/s in a sweep (3.2e6), and 4.6e6 (607 TFLOP/s) leaves room.
	 */
	{ "sm_90", 3.37e6, 6.6e6, 4.6e6, 8.3e6, 80e3, 3000, 132, 233472 },
	/* A100: 312 TFLOP/s at 108 SMs is 2.89e6 a SM; 1.9 TB/s of 2.0 */
	{ "sm_80", 2.45e6, 0, 2.9e6, 2.9e6, 50e3, 1900, 108, 167936 },
	/* consumer Ampere and Ada: f32 accumulation at half rate, 100 KiB of shared memory */
	{ "sm_86", 0.9e6, 0, 1.1e6, 1.1e6, 30e3, 900, 84, 102400 },
	{ "sm_89", 1.2e6, 0, 1.5e6, 1.5e6, 40e3, 1000, 128, 102400 },
};

/* Unknown archs (newer than the table) take sm_90's figures without wgmma, and no mma.sync bound. */
static const struct arch_figures newer = { "", 3.37e6, 0, 8.3e6, 8.3e6, 80e3, 3000, 132, 233472 };

/* Launch and the first wave's start, as the events of the protocol see it: 512^3 reads 7.2 us */
#define LAUNCH_US 4.5
/* The least a launch costs in the protocol's events (the bound's share) */
#define LAUNCH_MIN_US 2.0
/* Latency of a load from DRAM under load, and from L2 */
#define DRAM_LATENCY_US 0.8
#define L2_LATENCY_US 0.6
/* The latency a block of a busy SM sees for its next stage (the fit of the mma.sync sweep) */
#define LOADED_LATENCY_US 1.0
/*
 * What a round of mma.sync blocks costs beyond its work (their start, the
 * pipeline's fill), and a wgmma tile's epilogue beyond its stores: fitted,
 * with the figures above, to both H100 sweeps (log error 0.088 on the
 * shipped one; 512^3 within 7%).
 */
#define MMA_ROUND_US 1.6
#define WGMMA_EPILOGUE_US 0.5

static const struct arch_figures *figures_of(const char *arch)
{
	for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
		if (!strncmp(arch, archs[i].arch, strlen(archs[i].arch)))
			return &archs[i];
	return &newer;
}

static int64_t cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static double dmin(double a, double b)
{
	return a < b ? a : b;
}

static double dmax(double a, double b)
{
	return a > b ? a : b;
}

/* The device's figures resolved: its SM count and bandwidth, or the arch's. */
struct dev {
	const struct arch_figures *f;
	int sms;
	double bw;       /* DRAM bytes/us */
	double bw_sm;    /* the share of one SM */
	int smem_sm;
};

static void resolve(const struct ktune_gemm_device *d, struct dev *out)
{
	out->f = figures_of(d->arch);
	out->sms = d->sm_count > 0 ? d->sm_count : out->f->ref_sms;
	out->bw = (d->mem_gbps > 0 ? d->mem_gbps : out->f->mem_gbps) * 1e3;
	out->bw_sm = out->bw / out->sms;
	out->smem_sm = out->f->smem_sm;
	if (d->smem_optin > 0 && d->smem_optin + 1024 > out->smem_sm)
		out->smem_sm = d->smem_optin + 1024;
}

/* Bytes the GEMM must move at least: A and B read, C written (beta = 0), 16-bit elements. */
static double unique_bytes(const struct ktune_key *key)
{
	return 2.0 * ((double)key->m * key->k + (double)key->k * key->n + (double)key->m * key->n);
}

/* ------------------------------------------------------------ mma.sync */

/*
 * Registers a thread of the config needs: its accumulators, its
 * double-buffered A and B fragments and about 40 for addresses and loop
 * state (ptxas gave 232 for 128x256 with 2x4 warps, 64 for 16x32 with 1x2).
 */
static int mma_registers(const struct ktune_config *c)
{
	int mma_m = c->block_m / c->warps_m / 16, mma_n = c->block_n / c->warps_n / 8;
	int regs = mma_m * mma_n * 4 + 2 * (mma_m * 4 + mma_n * 2) + 40;
	regs = (regs + 7) / 8 * 8;
	return regs > 255 ? 255 : regs;
}

/* Blocks of the config resident on one SM: threads, registers, shared memory. */
static int mma_occupancy(const struct ktune_key *key, const struct ktune_config *c, const struct dev *d)
{
	int threads = c->warps_m * c->warps_n * 32;
	int warp_regs = (mma_registers(c) * 32 + 255) / 256 * 256;
	int by_threads = 2048 / threads;
	int by_regs = 65536 / (warp_regs * (threads / 32));
	int by_smem = d->smem_sm / (int)(ktune__gemm_smem_bytes(key, c) + 1024);
	int occ = by_threads < by_regs ? by_threads : by_regs;
	occ = occ < by_smem ? occ : by_smem;
	occ = occ < 32 ? occ : 32;
	return occ > 0 ? occ : 1;
}

/*
 * How much of the tensor rate a warp tile keeps: each k-step loads
 * MMA_M + MMA_N / 2 ldmatrix.x4 (512 bytes each) for MMA_M * MMA_N mma;
 * shared memory gives 128 bytes a clock, and the SM wants about half an mma
 * a clock, so past 0.5 loads per mma the warp waits for shared memory.
 */
static double mma_warp_efficiency(const struct ktune_config *c)
{
	double mma_m = c->block_m / c->warps_m / 16.0, mma_n = c->block_n / c->warps_n / 8.0;
	double loads = (mma_m + mma_n / 2) / (mma_m * mma_n);
	return loads <= 0.5 ? 1.0 : 0.5 / loads;
}

static void model_mma(const struct ktune_key *key, const struct ktune_config *c, const struct dev *d,
		      struct ktune_gemm_estimate *out)
{
	int64_t tiles = cdiv(key->m, c->block_m) * cdiv(key->n, c->block_n);
	int64_t kt = cdiv(key->k, c->block_k);
	int split = c->split_k > 1 ? c->split_k : 1;
	int64_t per = cdiv(kt, split), units = tiles * split;
	int occ = mma_occupancy(key, c, d), threads = c->warps_m * c->warps_n * 32;
	int64_t per_sm = cdiv(units, d->sms);
	int conc = per_sm < occ ? (int)per_sm : occ;
	int64_t rounds = cdiv(per_sm, occ);
	double stage_bytes = 2.0 * (c->block_m + c->block_n) * c->block_k;
	double stage_flops = 2.0 * c->block_m * c->block_n * c->block_k;
	double fpb = stage_flops / stage_bytes;
	double unit_flops = stage_flops * (double)per;
	double tile_c = 2.0 * c->block_m * c->block_n;

	/*
	 * The tensor rate a block keeps: less for warp tiles that load more
	 * per mma, for too few warps on the SM to cover the latency of
	 * ldmatrix and mma (the fit wants about 6), and a little less for
	 * smaller tiles (their share of barriers and address work); then no
	 * more than L2 can feed the tile.
	 */
	double warps = (double)conc * c->warps_m * c->warps_n;
	double rate = d->f->mma_rate * mma_warp_efficiency(c) * dmin(1.0, warps / 6.0) *
		      dmin(1.0, pow(c->block_m * c->block_n / 32768.0, 0.1));
	rate = dmin(rate, d->f->l2_rate * fpb);
	/*
	 * Latency: a block consumes a stage no sooner than STAGES - 1 stages
	 * after it asked for it, a loaded SM's L2 latency being about 1 us;
	 * the other blocks of the SM compute meanwhile.
	 */
	double t_alone = stage_flops / rate;
	rate = dmin(rate, conc * stage_flops / dmax(t_alone, LOADED_LATENCY_US / (c->stages - 1)));
	/*
	 * Bytes in flight: STAGES - 1 stages of cp.async per block; the
	 * element loads of the unaligned variant wait for each 16-byte chunk
	 * before storing it, so a thread has one chunk in flight, and each
	 * chunk is 8 loads and a store through the LSUs (4 warp instructions
	 * a clock, 1.75 GHz).
	 */
	double inflight = key->aligned ? (c->stages - 1) * stage_bytes : threads * 16.0;
	rate = dmin(rate, conc * inflight / L2_LATENCY_US * fpb);
	if (!key->aligned) {
		double lsu_us = stage_bytes / 2 * (1.0 / 32 + 1.0 / 256) / 4 / 1750;
		rate = dmin(rate, stage_flops / lsu_us);
	}
	double partial_write = split > 1 ? tile_c * 2 / d->f->l2_rate : 0; /* fp32 partials */
	double compute = (double)per_sm * (unit_flops / rate + partial_write / conc);

	double bytes = unique_bytes(key) + (split > 1 ? (double)split * key->m * key->n * 4 : 0);
	double blocks = (double)(units < (int64_t)d->sms * occ ? units : (int64_t)d->sms * occ);
	double mem_rate = dmin(d->bw, blocks * inflight / DRAM_LATENCY_US);
	double memory = bytes / mem_rate;

	/* each round starts its blocks and fills their pipelines, and ends storing its C tiles at the SM's share of DRAM */
	double per_round = MMA_ROUND_US + (key->aligned ? 1.0 : 2.0) * tile_c / d->bw_sm;
	/* split-K: the last block of a tile sums every split's fp32 partial tile from L2 */
	double reduce = split > 1 ? split * tile_c * 2 / d->f->l2_rate : 0;

	out->compute_us = compute;
	out->memory_us = memory;
	out->waves = (int)rounds;
	out->time_us = LAUNCH_US + dmax(compute, memory) + (double)rounds * per_round + reduce;
	/* the bound: the busiest SM's padded FLOPs at the peak rate, the bytes at the full bandwidth */
	out->bound_us = LAUNCH_MIN_US + dmax((double)per_sm * unit_flops / d->f->mma_peak,
					     unique_bytes(key) / (1.15 * d->bw));
}

/* --------------------------------------------------------------- wgmma */

static void model_wgmma(const struct ktune_key *key, const struct ktune_config *c, const struct dev *d,
			struct ktune_gemm_estimate *out)
{
	int cl = c->cluster_m > 1 ? c->cluster_m : 1;
	int64_t tiles = cdiv(key->m, (int64_t)c->block_m * cl) * cdiv(key->n, c->block_n);
	int64_t kt = cdiv(key->k, c->block_k);
	int split = c->split_k > 1 && cl == 1 ? c->split_k : 1;
	int64_t walkers = d->sms / cl > 0 ? d->sms / cl : 1;
	/* gemm_wgmma.cu: whole tiles first; the tiles of the last wave (all when fewer than the walkers) split */
	int64_t split_tiles = split > 1 ? (tiles < walkers ? tiles : tiles % walkers) : 0;
	int64_t whole = tiles - split_tiles;
	int64_t split_units = split_tiles * split;
	int64_t whole_pw = cdiv(whole, walkers), split_pw = cdiv(split_units, walkers);
	int64_t active = whole + split_units < walkers ? whole + split_units : walkers;

	double stage_bytes = 2.0 * (c->block_m + c->block_n) * c->block_k;
	double l2_bytes = 2.0 * (c->block_m + (double)c->block_n / cl) * c->block_k; /* B multicast */
	double stage_flops = 2.0 * c->block_m * c->block_n * c->block_k;
	double tile_c = 2.0 * c->block_m * c->block_n;
	/* one consumer issues alone; three hold 96 accumulators instead of 128 */
	double cons = c->consumers == 1 ? 0.85 : c->consumers == 3 ? 0.95 : 1.0;
	double rate = dmin(d->f->wgmma_rate * cons, d->f->l2_rate * stage_flops / l2_bytes);
	double t_k = stage_flops / rate;
	double epilogue = WGMMA_EPILOGUE_US + tile_c / d->bw_sm;
	double t_tile = (double)kt * t_k + epilogue;
	double t_unit = (double)cdiv(kt, split) * t_k + tile_c * 2 / d->f->l2_rate;
	double reduce = split_tiles ? split * tile_c * 2 / d->f->l2_rate + epilogue : 0;
	double compute = L2_LATENCY_US + (double)whole_pw * t_tile + (double)split_pw * t_unit + reduce;

	double bytes = unique_bytes(key) + (split_tiles ? (double)split_units * tile_c * 2 : 0);
	double inflight = (double)active * cl * (c->stages - 1) * stage_bytes;
	double memory = bytes / dmin(d->bw, inflight / DRAM_LATENCY_US);

	out->compute_us = compute;
	out->memory_us = memory;
	out->waves = (int)(whole_pw + (split_pw ? 1 : 0));
	out->time_us = LAUNCH_US + dmax(compute, memory);
	/*
	 * M <= 16: 64 rows of wgmma tiles for at most 16 of data.  None of
	 * the 64 keys with M <= 16 of the two shipped sweeps went to wgmma
	 * (the GEMV-like mma.sync tiles stream B, READ_ONCE_B); the model sees
	 * both at the memory floor, so this says what it cannot see.
	 */
	if (key->m <= 16)
		out->time_us *= 1.25;
	double busiest = (double)whole_pw * stage_flops * (double)kt +
			 (double)split_pw * stage_flops * (double)cdiv(kt, split);
	out->bound_us = LAUNCH_MIN_US + dmax(busiest / d->f->peak_rate, unique_bytes(key) / (1.15 * d->bw));
}

/* ---------------------------------------------------------------- gemv */

/*
 * gemv.cu streams B from DRAM straight into registers: its time is the
 * bytes at the rate its loads in flight reach (Little's law over the warps
 * resident at once, each with STAGES steps out), a DRAM latency for each
 * round of blocks to start, and split-K's fp32 partials and their sum.
 */
static void model_gemv(const struct ktune_key *key, const struct ktune_config *c, const struct dev *d,
		       struct ktune_gemm_estimate *out)
{
	int64_t tiles = cdiv(key->m, c->block_m) * cdiv(key->n, c->block_n);
	int split = c->split_k > 1 ? c->split_k : 1;
	int64_t blocks = tiles * split;
	int warps = c->warps_n * c->warps_k, warp_n = c->block_n / c->warps_n;
	int kstep = ktune__gemv_kstep(key);
	/* a lane's registers: B and A of the steps in flight, the accumulators, ~40 of addresses */
	int regs = c->stages * (warp_n * kstep / 64 + c->block_m / 2) + warp_n * c->block_m / 32 + 40;
	int warp_regs = ((regs + 7) / 8 * 8 * 32 + 255) / 256 * 256;
	int by_smem = d->smem_sm / (int)(ktune__gemm_smem_bytes(key, c) + 1024);
	int occ = 2048 / (warps * 32);
	if (occ > 65536 / (warp_regs * warps))
		occ = 65536 / (warp_regs * warps);
	if (occ > by_smem)
		occ = by_smem;
	occ = occ < 1 ? 1 : occ > 32 ? 32 : occ;

	int64_t resident = blocks < (int64_t)d->sms * occ ? blocks : (int64_t)d->sms * occ;
	double step_bytes = 2.0 * warp_n * kstep;
	double inflight = (double)resident * warps * c->stages * step_bytes;
	double bytes = unique_bytes(key) + (split > 1 ? 2.0 * split * key->m * key->n * 4 : 0);
	double memory = bytes / dmin(d->bw, inflight / DRAM_LATENCY_US);
	int64_t rounds = cdiv(blocks, (int64_t)d->sms * occ);
	double reduce = split > 1 ? L2_LATENCY_US + split * 4.0 * c->block_m * c->block_n / d->f->l2_rate : 0;

	out->compute_us = 2.0 * c->block_m * key->n * key->k / (d->f->mma_rate * d->sms);
	out->memory_us = memory;
	out->waves = (int)rounds;
	out->time_us = LAUNCH_US + dmax(out->compute_us, memory) + (double)rounds * DRAM_LATENCY_US + reduce;
	/*
	 * The H200 sweep of the 32 keys of M = 1 and 16 on the LLM weight
	 * shapes (docs/gemm.md): gemv's best 1.00-1.22x the GEMV-like mma.sync
	 * tiles' best, ahead on none by more than noise.  The terms above see
	 * both at the memory floor; this says what they cannot see, so that an
	 * untuned key keeps to the family that won its neighbours.
	 */
	out->time_us *= 1.25;
	out->bound_us = LAUNCH_MIN_US + unique_bytes(key) / (1.15 * d->bw);
}

void ktune__gemm_model(const struct ktune_key *key, const struct ktune_config *c,
		       const struct ktune_gemm_device *d, struct ktune_gemm_estimate *out)
{
	struct dev dv;
	resolve(d, &dv);
	memset(out, 0, sizeof(*out));
	if (c->family == KTUNE_GEMM_WGMMA)
		model_wgmma(key, c, &dv, out);
	else if (c->family == KTUNE_GEMM_GEMV)
		model_gemv(key, c, &dv, out);
	else
		model_mma(key, c, &dv, out);
	/*
	 * GROUP_SIZE changes no term above, but grouped tile order keeps the
	 * A and B panels of neighbouring tiles in L2 on a grid of many rows
	 * and columns of tiles: a hair's preference, so that ties go to it.
	 */
	int64_t rows = cdiv(key->m, (int64_t)c->block_m * (c->cluster_m > 1 ? c->cluster_m : 1));
	if (c->group_size <= 1 && rows >= 4 && cdiv(key->n, c->block_n) >= 4)
		out->time_us *= 1.005;
}

/* ---------------------------------------------------------------- pick */

struct pick {
	const struct ktune_space *space;
	const struct ktune_key *key;
	const struct ktune_gemm_device *dev;
	struct ktune_config best;
	struct ktune_gemm_estimate est;
	int found;
};

static int consider(const long *values, void *arg)
{
	struct pick *p = arg;
	struct ktune_config c;
	struct ktune_gemm_estimate est;
	char why[160];
	if (ktune__gemm_config_from_values(p->space, values, &c, NULL))
		return 0;
	if (ktune__gemm_prune(p->key, &c, p->dev->sm_count > 0 ? p->dev->sm_count : 132,
			      p->dev->smem_optin, why, sizeof(why)))
		return 0;
	ktune__gemm_model(p->key, &c, p->dev, &est);
	if (!p->found || est.time_us < p->est.time_us) {
		p->best = c;
		p->est = est;
		p->found = 1;
	}
	return 0;
}

int ktune__gemm_model_pick(const struct ktune_key *key, const struct ktune_gemm_device *d,
			   struct ktune_config *out, struct ktune_gemm_estimate *est)
{
	struct pick p = { .key = key, .dev = d };
	for (int f = 0; f < KTUNE_GEMM_NFAMILIES; f++) {
		if (!ktune__gemm_family_runs(f, d->arch, key->aligned))
			continue;
		p.space = ktune__gemm_family_space(f, NULL);
		if (p.space)
			ktune__space_enumerate(p.space, consider, &p);
	}
	if (!p.found)
		return -1;
	*out = p.best;
	if (est)
		*est = p.est;
	return 0;
}

/* ---------------------------------------------------------------- rank */

struct ranked {
	double time;
	int index;
	struct ktune_gemm_estimate est;
};

static int by_estimate(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;
	if (x->time != y->time)
		return x->time < y->time ? -1 : 1;
	return x->index - y->index;
}

void ktune__gemm_model_rank(const struct ktune_key *key, const struct ktune_gemm_device *d,
			    struct ktune_config *cfgs, int n, struct ktune_gemm_estimate *est)
{
	struct ranked *r = malloc((size_t)(n > 0 ? n : 1) * sizeof(*r));
	struct ktune_config *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof(*copy));
	if (!r || !copy) { /* out of memory: leave the order as it is, which is still a valid order */
		free(r);
		free(copy);
		for (int i = 0; est && i < n; i++)
			ktune__gemm_model(key, &cfgs[i], d, &est[i]);
		return;
	}
	for (int i = 0; i < n; i++) {
		ktune__gemm_model(key, &cfgs[i], d, &r[i].est);
		r[i].time = r[i].est.time_us;
		r[i].index = i;
	}
	qsort(r, (size_t)n, sizeof(*r), by_estimate);
	memcpy(copy, cfgs, (size_t)n * sizeof(*copy));
	for (int i = 0; i < n; i++) {
		cfgs[i] = copy[r[i].index];
		if (est)
			est[i] = r[i].est;
	}
	free(copy);
	free(r);
}

/* -------------------------------------------------------------- regime */

void ktune__gemm_regime(const struct ktune_key *key, const struct ktune_gemm_device *d,
			struct ktune_gemm_regime *out)
{
	struct dev dv;
	resolve(d, &dv);
	double rate = ktune__gemm_family_runs(KTUNE_GEMM_WGMMA, d->arch, key->aligned) ? dv.f->wgmma_rate
											: dv.f->mma_rate;
	double flops = ktune__gemm_flops(key), bytes = unique_bytes(key);
	double compute = flops / (rate * dv.sms), memory = bytes / dv.bw;
	int64_t big = key->m > key->n ? key->m : key->n;

	memset(out, 0, sizeof(*out));
	out->small_m = key->m <= 16;
	out->m_class = key->m <= 16 ? 0 : key->m <= 64 ? 1 : key->m <= 256 ? 2 : 3;
	/* fewer 128x128 tiles than SMs, and K at least 8 times the larger side: only split-K fills the GPU */
	out->deep_k = cdiv(key->m, 128) * cdiv(key->n, 128) < dv.sms && key->k >= 8 * big;
	out->memory_bound = memory > compute;
	out->ideal_us = dmax(compute, memory);
}
