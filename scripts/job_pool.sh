# shellcheck shell=bash
# Sourced by scripts/run_fuzz.sh and scripts/run_arm_tests.sh: a bounded pool of background jobs.
#
# run_pool JOBS LABEL LOG_DIR RUN NAME ITEM...
#   Runs `RUN ITEM` for every ITEM, JOBS at a time, in the background. `NAME ITEM` prints the
#   job's name, whose log RUN writes to LOG_DIR/NAME.log. When all are done, prints the end of
#   each failed job's log under "== LABEL: NAME failed" and returns 1 if any failed, else 0.
# Needs bash 5.1 (wait -n -p).
run_pool() {
  local jobs=$1 label=$2 log_dir=$3 run=$4 name_of=$5 item done_pid name running=0
  shift 5
  local -a failed=()
  local -A job_name=()
  for item in "$@"; do
    if [ $running -ge "$jobs" ]; then
      wait -n -p done_pid || failed+=("${job_name[$done_pid]}")
      running=$((running - 1))
    fi
    "$run" "$item" &
    job_name[$!]=$("$name_of" "$item")
    running=$((running + 1))
  done
  while [ $running -gt 0 ]; do
    wait -n -p done_pid || failed+=("${job_name[$done_pid]}")
    running=$((running - 1))
  done
  for name in "${failed[@]}"; do
    echo "== $label: $name failed; the end of $log_dir/$name.log:"
    tail -50 "$log_dir/$name.log"
  done
  [ ${#failed[@]} -eq 0 ]
}
