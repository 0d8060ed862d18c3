# shellcheck shell=bash
# Shared by contrib/slurm/up and contrib/slurm/down: a throw-away Slurm cluster of N virtual nodes
# on this one host, every file of it under one state directory. Sourced, not run.

GCOLL_SLURM_DIR=${GCOLL_SLURM_DIR:-/var/tmp/gcoll-slurm}
# Another path only for tests of these scripts: plain srun looks in /etc/slurm.
readonly slurm_conf=${GCOLL_SLURM_CONF:-/etc/slurm/slurm.conf}
readonly slurm_marker='# written by gcoll contrib/slurm/up'
# Proof that a directory is ours before anything removes it.
readonly state_stamp=.gcoll-slurm
# shellcheck disable=SC2034  # the next three are used by up
readonly slurm_packages='slurmctld slurmd munge libslurm-dev libpmi2-0-dev'
# shellcheck disable=SC2034
readonly ctld_port=16817
# shellcheck disable=SC2034
readonly first_node_port=17001
# Clients and daemons must read our file, not whatever SLURM_CONF a caller had exported.
export SLURM_CONF=$slurm_conf

die() {
  echo "slurm: $*" >&2
  exit 1
}

# Last lines of the daemon logs that may explain a failure, on stderr.
show_log_tails() {
  local log
  for log in "$@"; do
    [[ -s $log ]] || continue
    echo "--- tail of $log" >&2
    tail -n 15 "$log" >&2
  done
}

state_dir_check() {
  [[ $GCOLL_SLURM_DIR == /* && $GCOLL_SLURM_DIR != / && $GCOLL_SLURM_DIR != *[[:space:]]* ]] ||
    die "GCOLL_SLURM_DIR must be an absolute path without blanks, not '$GCOLL_SLURM_DIR'"
}

# Serialises up and down (and two concurrent ups). Lives beside the state directory because
# down removes that directory. The descriptor is closed for every daemon we start, or they would
# hold the lock for ever.
take_lock() {
  local lock=$GCOLL_SLURM_DIR.lock
  exec {lock_fd}>>"$lock" || die "cannot open lock file $lock"
  flock -w 120 "$lock_fd" || die "another contrib/slurm/up or down holds $lock for over 120 s"
}

# Test scripts hold this lock shared while they use the cluster (tests/slurm/lib.sh); down takes
# it exclusively so that it does not pull the cluster from under a running test.
users_lock_file() { echo "$GCOLL_SLURM_DIR.users"; }

# Prints the pid recorded in FILE if that process is alive and is the daemon NAME (a pid file can
# outlive its daemon and the pid be reused).
live_pid() {
  local file=$1 name=$2 pid
  [[ -r $file ]] || return 1
  read -r pid 2>/dev/null <"$file" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ $(pid_comm "$pid") == "$name" ]] || return 1
  echo "$pid"
}

# The command name of PID, or nothing once it has exited: a zombie counts as exited, since our
# daemons' parent is init here, which may take its time to reap them.
pid_comm() {
  local stat state
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 0
  state=${stat##*) }
  [[ ${state%% *} == Z ]] && return 0
  stat=${stat#*(}
  echo "${stat%)*}"
}

conf_is_ours() {
  [[ -f $slurm_conf ]] && grep -qxF "$slurm_marker" "$slurm_conf"
}

# n1 for one node, n[1-4] for four: the form sinfo and srun -w accept.
node_range() {
  local n=$1
  if ((n == 1)); then echo n1; else echo "n[1-$n]"; fi
}

# The pid files of our daemons: "file name" per line.
daemon_pid_files() {
  local sdir=$GCOLL_SLURM_DIR f
  for f in "$sdir"/run/slurmd-*.pid; do
    [[ -e $f ]] && echo "$f slurmd"
  done
  echo "$sdir/run/slurmctld.pid slurmctld"
  echo "$sdir/munge/munged.pid munged"
}

# SIGTERM to PIDS, then SIGKILL to those still alive after SECONDS.
stop_pids() {
  local seconds=$1 pid deadline left
  shift
  (($# > 0)) || return 0
  kill -TERM "$@" 2>/dev/null
  deadline=$((SECONDS + seconds))
  while ((SECONDS < deadline)); do
    left=0
    for pid in "$@"; do
      [[ -n $(pid_comm "$pid") ]] && left=1
    done
    ((left)) || return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null
  sleep 0.2
}

# Stops every daemon of ours and removes our state and configuration. Quiet; safe when nothing
# runs. Refuses to delete a directory that up did not create.
teardown() {
  local sdir=$GCOLL_SLURM_DIR slurmds=() ctld munged file name pid jobs deadline
  if [[ -e $sdir && ! -e $sdir/$state_stamp ]]; then
    die "$sdir exists but was not created by contrib/slurm/up; not touching it"
  fi
  if [[ -d $sdir ]]; then
    # Running steps would survive their slurmd; let Slurm end them while it still can.
    ctld=$(live_pid "$sdir/run/slurmctld.pid" slurmctld) || ctld=
    if [[ -n $ctld ]] && conf_is_ours; then
      jobs=$(timeout 5 squeue -h -o %i 2>/dev/null) || jobs=
      if [[ -n $jobs ]]; then
        # shellcheck disable=SC2086  # one job id per word
        timeout 5 scancel $jobs >/dev/null 2>&1
        deadline=$((SECONDS + 5))
        while ((SECONDS < deadline)) && [[ -n $(timeout 5 squeue -h -o %i 2>/dev/null) ]]; do
          sleep 0.2
        done
      fi
    fi
    while read -r file name; do
      pid=$(live_pid "$file" "$name") || continue
      case $name in
        slurmd) slurmds+=("$pid") ;;
        slurmctld) ctld=$pid ;;
        munged) munged=$pid ;;
      esac
    done < <(daemon_pid_files)
    # Each slurmd takes ~2 s to stop: stop them and slurmctld all at once. munged goes last,
    # since the others talk through it while they shut down.
    stop_pids 10 "${slurmds[@]}" ${ctld:+"$ctld"}
    stop_pids 5 ${munged:+"$munged"}
    rm -rf -- "$sdir"
  fi
  if conf_is_ours; then
    rm -f -- "$slurm_conf"
  fi
  return 0
}
