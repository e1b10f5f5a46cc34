#!/bin/sh
# Rehearsed preemption of the actors in a cluster: experiment.chaos, run by the chart's chaos Job (values.yaml,
# "chaos"). POSIX sh, kubectl and awk. Settings come from the Job's env, all whole numbers of seconds:
#   STATEFULSET, SELECTOR  the actors' StatefulSet and the label selector of its pods
#   REPLICAS, GRACE        actors.replicas, and the actors' terminationGracePeriodSeconds (a preemption's notice)
#   SEED                   which actor dies when is drawn from it
#   KILL_EVERY             delete one live actor every this many seconds (0: never)
#   RESTART                true: the StatefulSet recreates a deleted actor; false: scale down by one instead
#   ALIVE, WINDOW_START, WINDOW  keep only ALIVE actors from WINDOW_START for WINDOW seconds (WINDOW 0: no window)
# It exits once nothing is left to do: the window is over and no kill is scheduled (or all actors but the last
# are gone for good: as in the local launcher, the last one is never removed, or the run could not go on); with
# KILL_EVERY > 0 and RESTART=true it runs until the release is deleted.
set -u

start=$(date +%s)
now=0
target=$REPLICAS  # actors the StatefulSet has outside the window (less the ones removed for good)
window=before     # before | open | over
[ "$WINDOW" -gt 0 ] || window=over
kills=0
next_kill=$KILL_EVERY

log() { echo "chaos t=${now}s: $*"; }

# The StatefulSet's size now: the target, or ALIVE while the window holds the fleet down.
size() {
  if [ "$window" = open ] && [ "$ALIVE" -lt "$target" ]; then echo "$ALIVE"; else echo "$target"; fi
}

scale() {
  if kubectl scale statefulset "$STATEFULSET" --replicas="$1" >/dev/null; then
    log "scaled $STATEFULSET to $1 ($2)"
  else
    log "scaling $STATEFULSET to $1 failed"
  fi
}

kill_one() {
  kills=$((kills + 1))
  if [ "$RESTART" = false ]; then
    # Scaling down is the only way to keep a StatefulSet's pod away; it removes the highest ordinal.
    target=$((target - 1))
    scale "$(size)" "kill $kills: the highest actor removed for good, $target left"
    return
  fi
  # A running actor that is not already terminating, drawn from the seed and the kill count.
  pod=$(kubectl get pods -l "$SELECTOR" --field-selector=status.phase=Running --no-headers \
    -o custom-columns=NAME:.metadata.name,DELETING:.metadata.deletionTimestamp |
    awk -v seed="$SEED" -v n="$kills" '$2 == "<none>" { live[count++] = $1 }
      END { if (count) { srand(seed * 100003 + n); print live[int(rand() * count)] } }')
  if [ -z "$pod" ]; then
    log "kill $kills: no live actor"
  elif kubectl delete pod "$pod" --grace-period="$GRACE" --wait=false >/dev/null; then
    log "kill $kills: deleted $pod (SIGTERM, ${GRACE}s to exit; the StatefulSet starts it again)"
  else
    log "kill $kills: deleting $pod failed"
  fi
}

plan="kill every ${KILL_EVERY}s (restart=$RESTART)"
[ "$KILL_EVERY" -gt 0 ] || plan="no kills"
[ "$WINDOW" -eq 0 ] || plan="$plan; $ALIVE alive from ${WINDOW_START}s for ${WINDOW}s"
log "statefulset $STATEFULSET x$REPLICAS: $plan"
while :; do
  now=$(($(date +%s) - start))
  if [ "$window" = before ] && [ "$now" -ge "$WINDOW_START" ]; then
    window=open
    scale "$(size)" "window opens"
  fi
  if [ "$window" = open ] && [ "$now" -ge $((WINDOW_START + WINDOW)) ]; then
    window=over
    scale "$(size)" "window closes"
  fi
  if [ "$KILL_EVERY" -gt 0 ] && [ "$target" -gt 1 ] && [ "$now" -ge "$next_kill" ]; then
    kill_one
    next_kill=$((next_kill + KILL_EVERY))
  fi
  if [ "$window" = over ] && { [ "$KILL_EVERY" -eq 0 ] || [ "$target" -le 1 ]; }; then
    log "done"
    exit 0
  fi
  sleep 1
done
