-- schema.sql - the tuning database's schema at version 6 (PRAGMA user_version).
--
-- Documentation only: src/db/db.c creates and migrates databases with its
-- list of migrations, and tests/unit/test-db.c checks that a fresh database
-- has exactly the tables, columns and indexes below.  Keep the two in sync:
-- a column added by a migration (ALTER TABLE ... ADD COLUMN) goes at the end
-- of its table here.
--
-- Keys: op is one of the registry's ('gemm', 'add', 'gelu', 'glu', 'dropout';
-- src/ops/ops.c); dtype is 'f16', 'bf16' or 'f32'; layout holds the key's
-- variant, for GEMM two of 'n'/'t' for A and B ('nt': B stored [N, K],
-- PyTorch's nn.Linear), for another op its variant fields' values joined by
-- commas ('tanh,fwd'; '' for none); m, n, k are the op's sizes in its
-- order, 0 where it has fewer (GEMM: M, N, K; gelu: n elements in m;
-- glu: rows, cols in m, n); aligned is 0 or 1;
-- created_at and the claims' times are ISO 8601 UTC ('2025-01-31T12:00:00Z');
-- times of kernels are in microseconds.  A NULL time or error in trials
-- stands for NaN.

-- One row per GPU model as tuned: results are per (name, arch, SM count).
CREATE TABLE devices (
	id INTEGER PRIMARY KEY,
	name TEXT NOT NULL,          -- 'NVIDIA H100 80GB HBM3'
	arch TEXT NOT NULL,          -- 'sm_90'
	sm_count INTEGER NOT NULL,
	UNIQUE (name, arch, sm_count)
);

-- The best configuration per (device, problem key), with its provenance.
CREATE TABLE results (
	device_id INTEGER NOT NULL REFERENCES devices (id),
	op TEXT NOT NULL,            -- 'gemm', 'add', ... (version 5: every op)
	dtype TEXT NOT NULL,
	layout TEXT NOT NULL,
	m INTEGER NOT NULL,
	n INTEGER NOT NULL,
	k INTEGER NOT NULL,
	aligned INTEGER NOT NULL,
	family TEXT NOT NULL,        -- template family
	config TEXT NOT NULL,        -- 'BLOCK_M=128,BLOCK_N=128,...'
	template_hash TEXT NOT NULL, -- sha256 of the template source; a mismatch marks the result stale
	time_us REAL NOT NULL,       -- median
	tflops REAL NOT NULL,
	cublas_us REAL NOT NULL,     -- baseline from the same run; 0 if none
	err_fro REAL NOT NULL,       -- relative Frobenius error against the reference
	err_max REAL NOT NULL,       -- largest element error
	candidates INTEGER NOT NULL, -- configurations tried
	tune_s REAL NOT NULL,        -- seconds spent tuning the key
	nvrtc_version TEXT NOT NULL,
	driver_version TEXT NOT NULL,
	ktune_version TEXT NOT NULL,
	protocol TEXT NOT NULL,      -- benchmark protocol
	created_at TEXT NOT NULL,
	p20_us REAL NOT NULL DEFAULT 0, -- version 2
	p80_us REAL NOT NULL DEFAULT 0, -- version 2
	measure_note TEXT NOT NULL DEFAULT '', -- version 4: '' if clean, else what disturbed the timing
	PRIMARY KEY (device_id, op, dtype, layout, m, n, k, aligned)
);

-- Every candidate measured or rejected, with its outcome.
CREATE TABLE trials (
	id INTEGER PRIMARY KEY,
	device_id INTEGER NOT NULL REFERENCES devices (id),
	op TEXT NOT NULL,
	dtype TEXT NOT NULL,
	layout TEXT NOT NULL,
	m INTEGER NOT NULL,
	n INTEGER NOT NULL,
	k INTEGER NOT NULL,
	aligned INTEGER NOT NULL,
	family TEXT NOT NULL,
	config TEXT NOT NULL,
	template_hash TEXT NOT NULL,
	status TEXT NOT NULL,        -- 'ok', 'compile_error', 'launch_error', 'wrong', 'pruned', 'crashed', 'timeout'
	time_us REAL,                -- 0 unless ok
	err_fro REAL,
	err_max REAL,
	message TEXT NOT NULL,
	created_at TEXT NOT NULL,
	nvrtc_version TEXT NOT NULL DEFAULT '',   -- version 3: the toolchain it ran with
	driver_version TEXT NOT NULL DEFAULT '',
	tuning_id INTEGER,           -- version 6: its tuning (tunings.id); NULL before
	screen_us REAL               -- version 6: the screen's time; time_us is the last full measurement of a finalist
);

-- Version 2.
CREATE INDEX trials_key ON trials (device_id, op, dtype, layout, m, n, k, aligned);

-- Version 4: the keys that sweeps are tuning now, so that concurrent sweeps
-- tune each (device, key) once.  A row is taken when a sweep starts on the
-- key and deleted with the result it stores (or when it gives up).  A claim
-- whose heartbeat is older than the lease (10 minutes), or whose process is
-- gone from this host, is stale: the next sweep takes it over.
CREATE TABLE claims (
	device_id INTEGER NOT NULL REFERENCES devices (id),
	op TEXT NOT NULL,
	dtype TEXT NOT NULL,
	layout TEXT NOT NULL,
	m INTEGER NOT NULL,
	n INTEGER NOT NULL,
	k INTEGER NOT NULL,
	aligned INTEGER NOT NULL,
	template_hash TEXT NOT NULL, -- the template source being tuned
	owner TEXT NOT NULL,         -- one sweep: 'gpu3:4242:9f86d081884c7d65' (host:pid:random)
	pid INTEGER NOT NULL,        -- the owner's process
	host TEXT NOT NULL,          -- where pid is meaningful: 'gpu3 pid:[4026531836]' (name, pid namespace)
	claimed_at TEXT NOT NULL,
	heartbeat_at TEXT NOT NULL,  -- the owner was last known alive
	PRIMARY KEY (device_id, op, dtype, layout, m, n, k, aligned)
);

-- Version 6: each tuning of a key ('ktune tune', a sweep's key) and each
-- group pick that weighed it: what 'ktune explain' shows.  Its trials point
-- at it (trials.tuning_id), and every full measurement it took is in
-- measurements.
CREATE TABLE tunings (
	id INTEGER PRIMARY KEY,
	device_id INTEGER NOT NULL REFERENCES devices (id),
	op TEXT NOT NULL,
	dtype TEXT NOT NULL,
	layout TEXT NOT NULL,
	m INTEGER NOT NULL,
	n INTEGER NOT NULL,
	k INTEGER NOT NULL,
	aligned INTEGER NOT NULL,
	kind TEXT NOT NULL,          -- 'tune', or 'group' (the group pick at this key)
	outcome TEXT NOT NULL,       -- tune: 'tuned', 'none_right'; group: 'switched', 'kept', 'outvoted', 'own_tile', 'unfit', 'failed'
	winner TEXT NOT NULL,        -- the config stored; '' if none
	candidates INTEGER NOT NULL, -- configs tried (tune)
	pruned INTEGER NOT NULL,     -- configs of the space left out before compiling (pruned for the key and device, or not drawn by the budget)
	known_bad INTEGER NOT NULL,  -- configs skipped because they failed before (the negative cache)
	budget INTEGER NOT NULL,     -- candidates per key asked for; 0 = all
	seed INTEGER NOT NULL,
	smem_optin INTEGER NOT NULL, -- the device's shared memory per block, bytes: what pruning used
	baseline_us REAL NOT NULL,   -- cuBLAS (or the copy) in turns with the winner; 0 if none
	tune_s REAL NOT NULL,
	note TEXT NOT NULL,          -- the decisions in words, one a line (the runoff, the group pick)
	created_at TEXT NOT NULL
);

CREATE INDEX tunings_key ON tunings (device_id, op, dtype, layout, m, n, k, aligned);

-- Version 6: the full measurements of a tuning, in the order taken.
CREATE TABLE measurements (
	tuning_id INTEGER NOT NULL REFERENCES tunings (id),
	seq INTEGER NOT NULL,
	stage TEXT NOT NULL,  -- 'final', 'final_rev' (the finalists in order, then in reverse), 'turns' (the
	                      -- fastest in turns with the baseline), 'runoff' (the fastest of another tile), 'again'
	                      -- (the runoff's winner once more), 'group_own', 'group_tile', 'group_final'
	round INTEGER NOT NULL, -- the attempt (NVML saw a disturbance: measured again), or the group pick's round
	config TEXT NOT NULL, -- '' for the baseline (cuBLAS, or the copy of as many bytes)
	status TEXT NOT NULL, -- as trials.status
	time_us REAL,         -- median; p20 and p80 beside it
	p20_us REAL,
	p80_us REAL,
	reps INTEGER NOT NULL,
	PRIMARY KEY (tuning_id, seq)
);

-- Version 6: the keys that programs were served without a tuned entry (by
-- 'nearest', 'default' or another fallback), as they recorded them
-- (ktune_save_misses with no path; KTUNE_RECORD=db): what 'ktune sweep
-- --from-db' tunes.  Recordings of a key add up: calls is their sum,
-- source the last one's.
CREATE TABLE misses (
	device_id INTEGER NOT NULL REFERENCES devices (id),
	op TEXT NOT NULL,
	dtype TEXT NOT NULL,
	layout TEXT NOT NULL,
	m INTEGER NOT NULL,
	n INTEGER NOT NULL,
	k INTEGER NOT NULL,
	aligned INTEGER NOT NULL,
	source TEXT NOT NULL,        -- what served the key: 'nearest', 'default', ...
	calls INTEGER NOT NULL,
	first_seen TEXT NOT NULL,
	last_seen TEXT NOT NULL,
	PRIMARY KEY (device_id, op, dtype, layout, m, n, k, aligned)
);

PRAGMA user_version = 6;
