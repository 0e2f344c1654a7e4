#!/usr/bin/env bash
# Starts the one-node Slurm cluster the Slurm-mode tests run against (scripts/setup.sh calls it;
# it needs root and Debian's slurm-wlm + munge installed). Idempotent: it writes what is missing or
# changed, starts only what is not running, and waits until `sinfo` shows the node idle.
#
#   - munge: the key /etc/munge/munge.key (made when missing), munged as the munge user
#   - /etc/slurm/slurm.conf: cluster `gym`, one node `gym-c1` whose NodeAddr is 127.0.0.20 (the
#     tests run their compute node's sshd on that address, so Slurm's address for the node is the
#     SSH host), 32 CPUs (declared beyond the machine's cores with config_overrides: allocations
#     are cheap holders here, not work), select/cons_tres by CPU so several test allocations share
#     the node, partition `gym`, MinJobAge=5 (an ended job leaves squeue in seconds)
#   - ProctrackType=proctrack/linuxproc and TaskPlugin=task/none: no cgroups, which containers like
#     ours do not delegate
#   - slurmctld and slurmd (as root, logs under /var/log/slurm)
#
# A slurm.conf this script did not write (no marker line) is never touched: then it only starts
# the daemons and waits, and says so.
set -euo pipefail
log() { printf '[slurm-up] %s\n' "$*" >&2; }

for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null 2>&1 || { log "$tool is missing: install slurm-wlm and munge (scripts/setup.sh does)"; exit 1; }
done

node_name=gym-c1
node_addr=127.0.0.20
conf=/etc/slurm/slurm.conf
marker='# Written by gym-sandboxd scripts/slurm-up.sh'

# A process that runs (a zombie left for its parent to reap does not).
alive() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat")" != Z ]; }
running() { [ -f "$1" ] && alive "$(cat "$1")"; }

# munge
if [ ! -s /etc/munge/munge.key ]; then
  log "making the munge key"
  install -d -o munge -g munge -m 0700 /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  if ! running /run/munge/munged.pid; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
  fi
  for _ in $(seq 1 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n </dev/null | unmunge >/dev/null || { log "munged does not answer"; exit 1; }
fi

# slurm.conf
controller="$(hostname -s)"
wanted="$marker
ClusterName=gym
SlurmctldHost=${controller}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
# Batch jobs are scheduled at submit, not up to 3 s later (the holder job is one).
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=5
KillWait=2
InactiveLimit=0
SlurmdTimeout=60
NodeName=${node_name} NodeAddr=${node_addr} CPUs=32 State=UNKNOWN
PartitionName=gym Nodes=${node_name} Default=YES MaxTime=INFINITE State=UP"
restart=0
if [ -f "$conf" ] && ! grep -qF "$marker" "$conf"; then
  log "$conf was not written by this script: leaving it as it is"
elif [ "$(cat "$conf" 2>/dev/null)" != "$wanted" ]; then
  log "writing $conf"
  install -d /etc/slurm
  printf '%s\n' "$wanted" >"$conf.tmp" && mv "$conf.tmp" "$conf"
  restart=1
fi
install -d /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm

# Daemons: started when not running; restarted (by their pid files) when the configuration changed.
stop_by_pidfile() {
  if running "$1"; then
    kill "$(cat "$1")"
    for _ in $(seq 1 50); do running "$1" || break; sleep 0.1; done
  fi
}
if [ "$restart" = 1 ]; then
  stop_by_pidfile /run/slurmd.pid
  stop_by_pidfile /run/slurmctld.pid
fi
if ! running /run/slurmctld.pid; then
  log "starting slurmctld"
  slurmctld
fi
if ! running /run/slurmd.pid; then
  log "starting slurmd -N $node_name"
  slurmd -N "$node_name"
fi

# Ready: the controller answers and the node is idle (or mixed/allocated: tests already run).
state=""
for _ in $(seq 1 150); do
  state="$(sinfo -h -n "$node_name" -o '%T' 2>/dev/null | head -1 || true)"
  case "$state" in
    idle | mixed | allocated) break ;;
    down* | drain* | *'*')
      # A node that was down (an earlier run killed it) comes back once slurmd answers again.
      scontrol update nodename="$node_name" state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 0.2
done
case "$state" in
  idle | mixed | allocated) log "node $node_name is $state" ;;
  *) log "node $node_name is not up (state: ${state:-no answer}); see /var/log/slurm/"; exit 1 ;;
esac
