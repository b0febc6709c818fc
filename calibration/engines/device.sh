#!/usr/bin/env bash
# The lent GPU machine, one call at a time (its tool carries at most 64 MiB a call and keeps the
# machine 30 s after a call): bring an engine's bundle (vLLM, or SGLang with ENGINE=sglang) in parts, install it, run the engine campaign
# as a daemon that outlives the call, and come back for its results.
#
#   bash calibration/engines/device.sh stash DIR            copy DIR/part_* (carried) to /root/stash
#   bash calibration/engines/device.sh start DEADLINE_S [ARGS]  install the bundle (and .whl/), copy the
#                                                           code to /root/app, start the campaign daemon
#                                                           (`specdecsim calibrate engine --engine vllm
#                                                           --with-live ...` with ARGS), then watch
#   QUEUE=DIR bash calibration/engines/device.sh start DEADLINE_S   the same, running DIR's ProcessPlan
#                                                           files in name order instead (calibration/engines/queue.py, campaigns/)
#   bash calibration/engines/device.sh watch [SECONDS]     watch the daemon up to SECONDS (default 540)
#
# HOST_CORES_S=S (start): `specdecsim diagnose host-cores` for S seconds first, into host_cores.json.
# COLLECTIVES="2 4 8" (start): NCCL's and vLLM's custom allreduce at those world sizes first (a
# multi-GPU machine; issue 28), into collectives.jsonl beside the points.
# RESUME_POINTS=FILE (start): the campaign appends to a copy of FILE (a committed points file, .gz
# or plain), so the points it holds are skipped and only the rest are measured; RESUME_FILES="NAME=FILE ..."
# does the same for the points files of plans with a points_file of their own.
#
# Every stage that watches packs /root/results (points.jsonl, campaign.log) into $OUT/results.tgz
# every minute and when it ends. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the rest).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
stage=${1:?stage}
res=/root/results
out=${OUT:-/tmp/out}
mkdir -p "$res" "$out" /root/stash

pack() {
  tar czf "$out/results.tgz.part" -C "$res" . 2>/dev/null; mv -f "$out/results.tgz.part" "$out/results.tgz"
  ls -l "$res"
}

watch() {
  local limit=${1:-540} t0=$SECONDS seen=0 packed=$SECONDS
  while :; do
    # pack every minute: a call cut off by the device's time still brings back what was measured
    if [ $((SECONDS - packed)) -ge 60 ]; then pack > /dev/null; packed=$SECONDS; fi
    if [ -f "$res/campaign.log" ]; then
      local n; n=$(wc -l < "$res/campaign.log")
      if [ "$n" -gt "$seen" ]; then sed -n "$((seen + 1)),${n}p" "$res/campaign.log" | cut -c1-300; seen=$n; fi
    fi
    if ! kill -0 "$(cat "$res/campaign.pid" 2>/dev/null)" 2>/dev/null; then echo "campaign not running"; break; fi
    if grep -q "Traceback\|FAILED\|failed rc" "$res/campaign.log" 2>/dev/null && [ -n "${STOP_ON_ERROR:-}" ]; then
      echo "error in the log"; break; fi
    if [ $((SECONDS - t0)) -ge "$limit" ]; then echo "watch ended after $limit s; campaign still running"; break; fi
    sleep 3
  done
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
  pack
}

case $stage in
  stash)
    cp "${2:?DIR}"/part_* /root/stash/ && ls -l /root/stash && df -h /root | tail -1 ;;
  start)
    deadline=${2:?DEADLINE_S}; shift 2
    if [ ! -f /tmp/site/.installed ]; then
      t=$SECONDS
      [ -f "${BUNDLE_SHA:-/dev/null}" ] && cp "$BUNDLE_SHA" /root/stash/SHA256
      cat /root/stash/part_* > /tmp/bundle.tar.xz || exit 1
      if [ -f /root/stash/SHA256 ]; then
        [ "$(sha256sum /tmp/bundle.tar.xz | awk '{print $1}')" = "$(cat /root/stash/SHA256)" ] || { echo "bundle checksum mismatch"; exit 1; }
      fi
      mkdir -p /tmp/whl
      if command -v xz > /dev/null; then xz -d -T0 -c /tmp/bundle.tar.xz | tar -x -C /tmp/whl || exit 1
      else python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open('/tmp/bundle.tar.xz'), sys.stdout.buffer)" \
             | tar -x -C /tmp/whl || exit 1; fi
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/whl/*.whl $(ls .whl/*.whl 2>/dev/null) || exit 1
      touch /tmp/site/.installed
      echo "bundle installed in $((SECONDS - t)) s"
    fi
    kill -- -"$(cat "$res/campaign.pid" 2>/dev/null)" 2>/dev/null && sleep 2
    # RESUME_POINTS: a committed points file (.gz) the campaign resumes from (what it holds is skipped)
    if [ -n "${RESUME_POINTS:-}" ] && [ ! -s "$res/points.jsonl" ]; then
      zcat -f "$RESUME_POINTS" > "$res/points.jsonl" || exit 1
      echo "resuming from $RESUME_POINTS: $(wc -l < "$res/points.jsonl") lines"
    fi
    # RESUME_FILES="NAME=FILE ...": more points files to resume from, as $res/NAME (a ProcessPlan's points_file)
    for nf in ${RESUME_FILES:-}; do
      [ -s "$res/${nf%%=*}" ] || { zcat -f "${nf#*=}" > "$res/${nf%%=*}" || exit 1; echo "resuming ${nf%%=*} from ${nf#*=}"; }
    done
    rm -rf /root/app && mkdir -p /root/app && cp -r calibration simulator data /root/app/
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    # COLLECTIVES="2 4 8" (a machine of that many GPUs): NCCL's allreduce and vLLM's own custom allreduce at
    # those world sizes (quick grid, eager and graph) into $res/collectives.jsonl first (issue 28)
    if [ -n "${COLLECTIVES:-}" ]; then
      nvidia-smi topo -m > "$res/topology.txt" 2>&1
      ws=(); for w in $COLLECTIVES; do ws+=(--world-size "$w"); done
      for op in allreduce custom_allreduce; do  # apart: where vLLM declines its kernel, NCCL's points stand
        (cd /root/app && PYTHONPATH=/root/app:/tmp/site timeout 300 python3 -m simulator.cli calibrate collectives \
            --points "$res/collectives.jsonl" --quick "${ws[@]}" --op "$op" >> "$res/collectives.log" 2>&1)
        echo "collectives $op: rc $? ($(wc -l < "$res/collectives.jsonl" 2>/dev/null || echo 0) points)"
      done
    fi
    # HOST_CORES_S=S: each CPU's speed at the host probe, round after round for S seconds, before the engines
    if [ -n "${HOST_CORES_S:-}" ]; then
      (cd /root/app && PYTHONPATH=/root/app:/tmp/site timeout $((HOST_CORES_S + 60)) python3 -m simulator.cli diagnose \
          host-cores --out "$res/host_cores.json" --seconds "$HOST_CORES_S" --force > "$res/host_cores.log" 2>&1)
      echo "host-cores: rc $?"; tail -8 "$res/host_cores.log"
    fi
    if [ -n "${QUEUE:-}" ]; then  # a queue of ProcessPlan files (calibration/engines/queue.py), run in name order
      cp -r "$QUEUE" /root/app/queue
      cd /root/app
      PYTHONPATH=/root/app:/tmp/site setsid nohup python3 -m simulator.cli calibrate engine-queue-run /root/app/queue \
          "$res/points.jsonl" --deadline-s "$deadline" >> "$res/campaign.log" 2>&1 < /dev/null &
    else
    cd /root/app
    PYTHONPATH=/root/app:/tmp/site setsid nohup python3 -m simulator.cli calibrate engine --engine "${ENGINE:-vllm}" \
        --out "$res/engine_profile.json" --points "$res/points.jsonl" --with-live "$res/live" \
        --deadline-s "$deadline" "$@" >> "$res/campaign.log" 2>&1 < /dev/null &
    fi
    echo $! > "$res/campaign.pid"
    cd - > /dev/null
    sleep 2
    watch "${WATCH_S:-500}" ;;
  watch)
    watch "${2:-540}" ;;
esac
