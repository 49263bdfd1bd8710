#!/usr/bin/env bash
# bench/wgmma/probe.sh - on the GPU: time the probe variants compiled into
# $PROBE/cubin (by `harness compile-probe`, see README.md) against cuBLAS at
# each shape, and profile the variants in $PROBE/ncu under Nsight Compute.
#
#   PROBE=build-probe bash bench/wgmma/probe.sh "8192 8192 8192" "4096 4096 4096" ...
#
# NCU_SHAPE="M N K" also runs ncu (clocks left alone) on $PROBE/ncu's
# variants and cuBLAS at that shape.  NCU_SOURCE="DIR ..." profiles the first
# launch of the variant in each $PROBE/DIR (one variant a directory) with
# warp-state and per-instruction stall counters, into $OUT/DIR.source.csv.
# NCU_SAMPLING sets ncu's warp sampling interval (0: every 32 cycles, for
# kernels too short for the default to sample much).  NCU_SOURCE_KERNEL
# (a regex, default gemm_wgmma) picks the kernel: nvjet profiles the cuBLAS
# launch that follows the variant instead, to read its SASS.
# PROBE_TIMEOUT (seconds a shape, default 300) cuts off a variant that hangs.
# Logs go under $OUT.
set -u
P=${PROBE:-build-probe}
OUT=${OUT:-/tmp/probe-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv >"$OUT/env.txt" 2>&1
for shape in "$@"; do
	echo "== $shape" | tee -a "$OUT/probe.log"
	# line-buffered, so that a shape cut off by the timeout (a hang) keeps its rows
	timeout ${PROBE_TIMEOUT:-300} stdbuf -oL "$P/harness" probe "$P/cubin" $shape 2>&1 | tee -a "$OUT/probe.log"
done
# NCU_SHAPES="M N K;M N K;...": ncu at each shape, on $P/ncu_MxNxK's variants
# where that directory exists (else $P/ncu's), with the launch statistics
# (grid, block, cluster, shared memory) that show how cuBLAS's kernel is cut;
# a file "splits" in the directory sets PROBE_SPLITS there.
shapes=${NCU_SHAPES:-${NCU_SHAPE:-}}
if [ -n "$shapes" ]; then
	ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_active.max,sm__cycles_active.sum,sm__cycles_elapsed.max,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes.sum.per_second,dram__bytes.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
	IFS=';' read -ra list <<<"$shapes"
	for shape in "${list[@]}"; do
		dir="$P/ncu_$(echo $shape | tr ' ' x)"
		[ -d "$dir" ] || dir="$P/ncu"
		[ -d "$dir" ] || continue
		log="$OUT/ncu_$(echo $shape | tr ' ' x).log"
		PROBE_SPLITS=$(cat "$dir/splits" 2>/dev/null || echo "${PROBE_SPLITS:-1}") \
		PROBE_RUNS=1 timeout 240 "$ncu" --clock-control none -k regex:'wgmma|xmma|nvjet|cutlass|sm90|gemm|splitK|reduce' -c 16 \
			--section LaunchStats --metrics "$metrics" "$P/harness" probe "$dir" $shape >"$log" 2>&1
		echo "ncu exit $?" >>"$log"
	done
fi
if [ -n "${NCU_SOURCE:-}" ]; then
	ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	for d in $NCU_SOURCE; do
		PROBE_RUNS=1 timeout 200 "$ncu" --clock-control none -k regex:${NCU_SOURCE_KERNEL:-gemm_wgmma} -c 1 \
			--warp-sampling-interval ${NCU_SAMPLING:-auto} --section WarpStateStats --section SourceCounters --section SpeedOfLight \
			--section InstructionStats -o "$OUT/$d" "$P/harness" probe "$P/$d" ${NCU_SOURCE_SHAPE:-4096 4096 4096} >"$OUT/$d.ncu.log" 2>&1
		"$ncu" -i "$OUT/$d.ncu-rep" --page details >"$OUT/$d.details.txt" 2>&1
		"$ncu" -i "$OUT/$d.ncu-rep" --page source --csv --print-source sass >"$OUT/$d.source.csv" 2>&1
		rm -f "$OUT/$d.ncu-rep"
		command -v cuobjdump >/dev/null && cuobjdump -sass "$P/$d"/*.cubin >"$OUT/$d.sass" 2>&1
	done
fi
if [ -n "$shapes" ] && [ -d "$P/ncu" ]; then
	command -v cuobjdump >/dev/null && for f in "$P"/ncu/*.cubin; do
		cuobjdump -sass "$f" >"$OUT/$(basename "$f" .cubin).sass" 2>&1
	done
fi
