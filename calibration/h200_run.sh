#!/usr/bin/env bash
# One call on a lent GPU machine: calibration and the live grid, results under $OUT.
#   bash calibration/h200_run.sh quick|traces|traces-session|comm-stream|engine-moe|engine-moe-wide|calibrate|live|noise|batch|serving|loop-reps|overhead|collectives|session|tp-forwards|tp-skew|tp|tp-noise|moe-all|all
# Needs the wheels in .whl/ (pydantic, pydantic-core, annotated-types, typing-inspection, simpy, prometheus_client)
# for the machine's python3, which has torch (and typer, rich, numpy, scipy, pyyaml) but not those.
# Multicast stays off. Every case is a `specdecsim` subcommand, run as `python3 -m simulator.cli`
# (the project is on PYTHONPATH there, not pip-installed, so there is no console script).
set -uo pipefail
what=${1:-quick}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site
out=${OUT:-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
specdecsim=(python3 -m simulator.cli)  # `timeout` runs a program, not a shell function
quiet() { grep -v Warning | grep -v scaled_dot_product; }
case $what in
  quick)
    timeout 240 "${specdecsim[@]}" calibrate --quick --out "$out/h200_quick.json" --points "$out/h200_quick_points.jsonl" 2>&1 | quiet
    timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_live.py -k gpu
    timeout 200 "${specdecsim[@]}" live --quick --out /tmp/live_quick 2>&1 | quiet
    tar czf "$out/live_quick.tgz" -C /tmp live_quick ;;
  traces)  # the live loop under torch.profiler, a profile from the traces alone, validated on the live records
    for m in 8b 1b; do
      timeout 200 "${specdecsim[@]}" diagnose trace --out "$out/traces_$m" --model $m --steps 1,2,3,4,5,6,7,8 --cycles 24 2>&1 | quiet | tail -3
      "${specdecsim[@]}" calibrate from-traces "$out/traces_$m" --out "$out/traces_$m.json" 2>&1 | tail -3
      "${specdecsim[@]}" validate --profile "$out/traces_$m.json" --costs-source whole_forward --judge-mode graph \
        --json "$out/val_$m.json" data/live/h200/${m}_graph_b1_*_rep3.json 2>&1 | tail -25
    done
    tar czf "$out/traces.tgz" -C "$out" traces_8b traces_1b && rm -rf "$out/traces_8b" "$out/traces_1b" ;;
  traces-session)  # traces and live runs in one session (a profile from traces against same-session live runs),
                   # and a small real trace to commit
    timeout 120 "${specdecsim[@]}" live --quick --out "$out/live_quick" 2>&1 | quiet | tail -3
    for m in 8b 1b; do
      timeout 150 "${specdecsim[@]}" diagnose trace --out "$out/traces_$m" --model $m --steps 1,2,3,4,5 --cycles 24 2>&1 | quiet | tail -1
      "${specdecsim[@]}" calibrate from-traces "$out/traces_$m" --out "$out/traces_$m.json" 2>&1 | tail -2
      "${specdecsim[@]}" validate --profile "$out/traces_$m.json" --costs-source whole_forward --judge-mode graph \
        "$out"/live_quick/${m}_graph_b1_*.json 2>&1 | tail -4
    done
    timeout 60 "${specdecsim[@]}" diagnose trace --out "$out/trace_small" --model 1b --steps 3 --cycles 4 2>&1 | tail -1
    tar czf "$out/traces_session.tgz" -C "$out" live_quick traces_8b traces_1b trace_small traces_8b.json traces_1b.json
    rm -rf "$out/traces_8b" "$out/traces_1b" "$out/live_quick" ;;
  calibrate)  # resumes from the committed points: only points not yet measured run
    timeout 540 "${specdecsim[@]}" calibrate --out "$out/h200.json" --points data/points/h200.jsonl 2>&1 | quiet
    cp data/points/h200.jsonl "$out/h200_points.jsonl" ;;
  live)  # resumes into the committed records folder: only missing points run
    timeout 540 "${specdecsim[@]}" live --out data/live/h200 2>&1 | quiet
    tar czf "$out/live_h200.tgz" data/live/h200 ;;
  noise)  # graph batch-1 grid, 3 repeats per point (+ paired baselines), into the committed records
          # folder; forward drift against the profile before and after, loop overhead vs GPU wait
    timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_live.py -k gpu 2>&1 | tail -2
    timeout 150 "${specdecsim[@]}" diagnose drift ${DRIFT_ARGS:-} --out "$out/drift_before.json" 2>&1 | quiet
    timeout 330 "${specdecsim[@]}" live --noise --out data/live/h200 2>&1 | quiet | tail -60
    timeout 60 "${specdecsim[@]}" diagnose drift --skip-overhead --out "$out/drift_after.json" 2>&1 | quiet
    tar czf "$out/live_h200.tgz" data/live/h200 ;;
  batch)  # one H200, one call (~7-8 min): whole forwards at batch 1..64 (8B and 1B shapes, CUDA graphs), a profile of
          # them merged with the committed points, the live batch grid (8B; SIZES=8b,1b for both) and its validation
    timeout 180 "${specdecsim[@]}" calibrate forwards-batch --points "$out/h200_batch_points.jsonl" --sizes 8b,1b 2>&1 | quiet | tail -3
    "${specdecsim[@]}" calibrate merge --points data/points/h200.jsonl --points data/points/h200_collectives.jsonl \
      --points data/points/h200_tp_forwards.jsonl --points data/points/h200_session_forwards.jsonl \
      --points "$out/h200_batch_points.jsonl" --out "$out/h200_batch.json" --name h200_batch \
      --gpu-count 2 --interconnect "NVLink (NV18) between 2 GPUs (collectives, tp-2 forwards); op, tp-1 forward, batch forward and host tables on one GPU" \
      --topology "GPU0-GPU1 NV18 (nvidia-smi topo -m on the lent 2x H200 machine)" --catalog-gpu h200-sxm --catalog-box 2x-h200-nvlink 2>&1 | tail -2
    timeout 400 "${specdecsim[@]}" live --batch-grid --sizes ${SIZES:-8b} --out "$out/live_batch" 2>&1 | quiet | tail -40
    "${specdecsim[@]}" validate "$out/live_batch" --profile "$out/h200_batch.json" --costs-source whole_forward \
      --json "$out/val_batch.json" 2>&1 | tail -30
    tar czf "$out/live_batch.tgz" -C "$out" live_batch && rm -rf "$out/live_batch" ;;
  serving)  # one H200, one call (~4-5 min, under 8): the live loop as a closed-loop server (8B shapes, CUDA graphs,
            # fixed slots, pre-filled KV) at concurrency 1,4,16,32, num_steps 3 at acceptance 0.7 and the baseline,
            # max(24, 12 x C) requests of 64..256 output tokens each (live runs ~2-3 min: about 70 engine steps per
            # request over C slots at 7-11 ms a step); then the serving DES on each record's scenario
            # (whole forwards of data/profiles/h200_batch.json), tok/s and TPOT p50 within 5%
    timeout 400 "${specdecsim[@]}" live --serving --sizes 8b --concurrency 1,4,16,32 --num-steps 3 \
      --out "$out/live_serving" 2>&1 | quiet | tail -30
    timeout 120 "${specdecsim[@]}" validate-serving "$out/live_serving" --profile data/profiles/h200_batch.json \
      --costs-source whole_forward --json "$out/val_serving.json" 2>&1 | tail -20
    tar czf "$out/live_serving.tgz" -C "$out" live_serving && rm -rf "$out/live_serving" ;;
  collectives)  # a multi-GPU machine: allreduce / broadcast / all_gather for every world size
    nvidia-smi topo -m
    timeout 300 "${specdecsim[@]}" calibrate collectives --points data/points/h200_collectives.jsonl 2>&1 | quiet | tail -20
    cp data/points/h200_collectives.jsonl "$out/" ;;
  comm-stream)  # 2 GPUs: allreduce in graph, eager (one call per sample) and eager_stream (20 back-to-back calls)
               # in one session, the sizes of the public eager curve (data/cases/comm_public.yaml) and above
    nvidia-smi topo -m
    sizes=(); for s in 128 1024 4096 16384 32768 65536 131072 262144 524288 1048576 2097152 4194304; do sizes+=(--size-bytes $s); done
    timeout 400 "${specdecsim[@]}" calibrate collectives --points "$out/h200_collectives_stream.jsonl" --world-size 2 \
      --op allreduce --mode graph --mode eager --mode eager_stream "${sizes[@]}" 2>&1 | quiet | tail -12 ;;
  loop-reps)  # the calibration's tiny-model loop overheads, 5 interleaved repeats (profile host figures),
              # and their curve over GPU waits of 0-20 ms
    timeout 500 "${specdecsim[@]}" calibrate loop-reps --points data/points/h200.jsonl 2>&1 | quiet | tail -5
    grep loop_wait data/points/h200.jsonl | cut -c1-200
    cp data/points/h200.jsonl "$out/h200_points.jsonl" ;;
  overhead)  # live-loop host time vs GPU time per cycle (probe target, 3 interleaved passes)
    timeout 540 "${specdecsim[@]}" calibrate loop-overhead --points data/points/h200.jsonl 2>&1 | quiet | tail -30
    cp data/points/h200.jsonl "$out/h200_points.jsonl" ;;
  session)  # one H200: the graph whole forwards (targets, drafts' step and extend; contexts 1024, 2048)
            # timed afresh, then the interleaved noise grid minutes later, into a new records folder,
            # so a profile with those forwards and the records share one session of the machine
    timeout 550 "${specdecsim[@]}" calibrate session --points data/points/h200_session_forwards.jsonl \
      --out data/live/h200_session 2>&1 | quiet | tail -15
    tar czf "$out/session.tgz" data/points/h200_session_forwards.jsonl data/live/h200_session ;;
  tp-forwards)  # a multi-GPU machine: the op points still missing on GPU 0 alone (one process, no
                # collectives), then whole target forwards over TP groups of 2 .. all GPUs
    CUDA_VISIBLE_DEVICES=0 timeout 300 "${specdecsim[@]}" calibrate --out "$out/h200.json" --points data/points/h200.jsonl 2>&1 | quiet | tail -8
    nvidia-smi topo -m
    timeout 240 "${specdecsim[@]}" calibrate tp-forwards --sizes 8b,1b --points data/points/h200_tp_forwards.jsonl 2>&1 | quiet | tail -12
    tar czf "$out/points.tgz" data/points/h200.jsonl data/points/h200_tp_forwards.jsonl ;;
  tp-noise)  # tensor-parallel live grid over every GPU, every point 3 times in interleaved passes with
             # paired baselines, into data/live/h200_tp<N>_noise
    n=$(nvidia-smi -L | wc -l)
    timeout 540 "${specdecsim[@]}" live --tp "$n" --noise --sizes ${SIZES:-8b} --out "data/live/h200_tp${n}_noise" 2>&1 | quiet | tail -40
    tar czf "$out/live_h200_tp${n}_noise.tgz" "data/live/h200_tp${n}_noise" ;;
  tp-skew)  # 2+ GPUs: a TP forward timed on rank 0 / on the last rank to launch / back to back, then
            # the quick tp live grid in the same session (its table: the baseline's decode phase to compare)
    n=$(nvidia-smi -L | wc -l)
    timeout 200 "${specdecsim[@]}" diagnose tp-skew --tp "$n" --out "$out/tp_skew.json" 2>&1 | quiet | tail -14
    [ -n "${SKEW_ONLY:-}" ] && exit 0
    timeout 240 "${specdecsim[@]}" live --tp "$n" --quick --sizes 8b --out /tmp/tpq 2>&1 | quiet | tail -12
    tar czf "$out/tpq.tgz" -C /tmp tpq ;;
  tp)  # tensor-parallel live grid over every GPU of the machine (one GPU: a tp 1 smoke run of the
       # NCCL + CUDA-graph path), into data/live/h200_tp<N>; QUICK=1 for the small grid
    n=$(nvidia-smi -L | wc -l)
    nvidia-smi topo -m
    timeout 540 "${specdecsim[@]}" live --tp "$n" ${QUICK:+--quick} --out "data/live/h200_tp$n" 2>&1 | quiet | tail -40
    tar czf "$out/live_h200_tp$n.tgz" "data/live/h200_tp$n" ;;
  engine-moe)  # one GPU: SGLang's own Triton fused-MoE kernels (carry .engine_src: the sglang package's two MoE
               # files and its configs, not part of this project; calibration/bench/engine_moe.py)
    timeout 540 "${specdecsim[@]}" calibrate engine-moe --engine-src .engine_src --out "$out/h200_engine_moe.jsonl" 2>&1 \
      | grep -v "Performance might be sub-optimal" | tail -60 ;;
  engine-moe-wide)  # one GPU: the same kernels at experts wider on a rank than TP8's (docs/make_moe_law_check.py):
                    # Qwen3-30B-A3B's at TP1 (768 over hidden 2,048) and 64 experts 1,024 wide over hidden 7,168 (a
                    # DeepSeek-V3 EP4 x TP2 rank's width; top 8 of the 64); fp8 block-128; carry .engine_src
    timeout 540 "${specdecsim[@]}" calibrate engine-moe --engine-src .engine_src --out "$out/h200_engine_moe_wide.jsonl" \
      --shape qwen3-30b-a3b-tp1:128:2048:768:8:fp8_block128 --shape deepseek-v3-64x1024:64:7168:1024:8:fp8_block128 2>&1 \
      | grep -v "Performance might be sub-optimal" | tail -40 ;;
  moe-all)  # one GPU: the routed-expert layer of every model shape, bf16 grouped GEMM and fp8 (scaled grouped
            # GEMM, or the per-expert scaled GEMM loop where that is all torch has), one JSON per shape and dtype
    timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_bench_moe.py 2>&1 | tail -2
    for dtype in bf16 fp8; do
      for shape in qwen3-30b-a3b-tp1 deepseek-v3-tp8 kimi-k2-tp8; do
        timeout 240 "${specdecsim[@]}" calibrate moe --shape "$shape" --dtype "$dtype" --force \
          --out "$out/moe_${shape}_${dtype}.json" 2>&1 | quiet | tail -18
      done
    done
    tar czf "$out/moe_all.tgz" -C "$out" $(cd "$out" && ls moe_*.json) ;;
  all)
    timeout 300 "${specdecsim[@]}" calibrate --out "$out/h200.json" --points "$out/h200_points.jsonl" 2>&1 | quiet
    timeout 230 "${specdecsim[@]}" live --out /tmp/live_h200 2>&1 | quiet
    tar czf "$out/live_h200.tgz" -C /tmp live_h200
    timeout 40 "${specdecsim[@]}" diagnose verify 2>&1 | quiet ;;
esac
