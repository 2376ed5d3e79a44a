#!/usr/bin/env bash
# DNS benchmark: `tideway dns` and Knot serve the same synthetic cluster zone (10,000 ClusterIP
# Services with an SRV each in 100 namespaces, 1,000 headless Services x 5 endpoints) and get
# the same dnsperf runs: 70% ClusterIP A, 10% SRV, 10% in-zone NXDOMAIN, 10% headless A.
#
# Pinned runs hold every server thread on CPU 1 and dnsperf on CPU 0 (see hold_on_cpu).
# For every run it records dnsperf's QPS and latency, the server's own CPU seconds (utime +
# stime from /proc/PID/stat: the box is shared, so answers per server CPU-second is the fair
# figure), the whole box's busy CPU (to show background load), and RSS/PSS.
# The box's busy CPU is the run's wall time on every CPU less the idle time /proc/stat
# reports: the idle time is measured when a CPU leaves idle, while the busy fields are
# sampled by the timer tick, which misses most of a server's short bursts between sleeps
# (at 20k QPS they read half of what the server and dnsperf spent).
#
# Usage: bench/dns/run.sh            (about 9 minutes plus a release build)
#   DURATION=20   seconds per saturation run
#   RATE=20000    queries per second of the fixed-rate latency run
#   ROUNDS=3      alternating tideway/Knot/floor rounds of the headline and fixed-rate runs
#                 (medians reported)
#   BENCH_DIR=... scratch directory (default: a new one under /tmp)
#   TIDEWAY_BIN=... measure this tideway binary instead of building one (another build)
#   SERVERS="tideway tideway-floor tideway-lowmem tideway-hickory knot"
#                 tideway-lowmem: the same binary, its allocator told to return freed memory
#                 at once; tideway-hickory: UDP through hickory-server's own socket loop
#                 (--udp-engine hickory) instead of the recvmmsg workers; tideway-floor: the
#                 same socket code answering every query with one canned reply
#                 (--udp-engine floor), the most any server on it could do; see
#                 docs/benchmarks.md
# Installs dnsperf, knot and bc from Debian when missing. Loopback only (ports 25353, 35353).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
B=${BENCH_DIR:-$(mktemp -d /tmp/tideway-dns-bench.XXXXXX)}
DURATION=${DURATION:-20}
RATE=${RATE:-20000}
SERVERS=${SERVERS:-"tideway tideway-floor tideway-lowmem tideway-hickory knot"}
ROUNDS=${ROUNDS:-3}
KNOT_PORT=25353
# Pinned runs: the server on one core, dnsperf on the other.
SERVER_CPU=1
CLIENT_CPU=0
TW_PORT=35353

missing=()
for p in dnsperf knot bc dnsutils; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -n "${TIDEWAY_BIN:-}" ]; then
  TIDEWAY=$(realpath "$TIDEWAY_BIN")
else
  echo "building tideway (release)..." >&2
  (cd "$ROOT" && cargo build --release -p tideway --features bench >&2)
  TIDEWAY=$ROOT/target/release/tideway
fi

mkdir -p "$B/zones" "$B/knot/db" "$B/knot/run" "$B/results"
python3 "$HERE/gen.py" "$B/zones/cluster.local.zone" "$B/queries.txt"
python3 "$HERE/gen_cluster.py" "$B/cluster.yaml"
grep -v -E 'nosuch|example|\.ns-[0-9]+\.ns-' "$B/queries.txt" > "$B/q-positive.txt"
grep -E 'nosuch|www\.example|\.ns-[0-9]+\.ns-' "$B/queries.txt" > "$B/q-nx.txt"
: > "$B/empty-resolv.conf"
sed "s|@BENCH@|$B|g; s|@PORT@|$KNOT_PORT|g" "$HERE/knot.conf" > "$B/knot/knot.conf"
echo "scratch: $B" >&2

SPID=""
# start_server NAME WORKERS PIN LABEL
start_server() {
  local name=$1 workers=$2 pin=$3 label=$4 port cmd
  local spin=()
  [ "$pin" = yes ] && spin=(taskset -c "$SERVER_CPU")
  case $name in
    knot)
      port=$KNOT_PORT
      sed "s/udp-workers: .*/udp-workers: $workers/" "$B/knot/knot.conf" > "$B/knot/run.conf"
      rm -rf "$B/knot/db/"*
      cmd=(knotd -c "$B/knot/run.conf") ;;
    tideway|tideway-lowmem|tideway-hickory|tideway-floor)
      port=$TW_PORT
      cmd=("$TIDEWAY" dns --source "file:$B/cluster.yaml" --listen "127.0.0.1:$TW_PORT"
           --upstream-resolv-conf "$B/empty-resolv.conf" --workers "$workers"
           --health-listen 127.0.0.1:38080 --ready-listen 127.0.0.1:38181 --metrics-listen 127.0.0.1:39153
           --lameduck 0s --no-loop-probe ${TIDEWAY_ARGS:-})
      [ "$name" = tideway-hickory ] && cmd+=(--udp-engine hickory)
      [ "$name" = tideway-floor ] && cmd+=(--udp-engine floor) ;;
  esac
  local envs=()
  [ "$name" = tideway-lowmem ] && envs=(env MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0)
  "${envs[@]}" "${spin[@]}" "${cmd[@]}" > "$B/results/$label.server.log" 2>&1 &
  SPID=$!
  SPORT=$port
  for _ in $(seq 1 300); do
    dig @127.0.0.1 -p "$port" +time=1 +tries=1 +short svc-5.ns-7.svc.cluster.local A 2>/dev/null | grep -q 10.96 && break
    sleep 0.2
  done
  [ "$pin" = yes ] && hold_on_cpu "$SERVER_CPU" "$label"
  sleep 1
}

# hold_on_cpu CPU LABEL: puts every thread of the server on CPU and checks that each one is
# there. Knot pins UDP worker N to CPU N % (online CPUs) itself, whatever it was started
# under, so `taskset -c 1 knotd` alone leaves its one UDP worker on CPU 0, the client's core
# (cheaper wakeups on a shared core, and a server that can only use half of it).
hold_on_cpu() {
  local cpu=$1 label=$2 t on off=0
  taskset -a -p -c "$cpu" "$SPID" > /dev/null
  for t in /proc/"$SPID"/task/*; do
    # A thread may end between the listing and the read.
    on=$(awk '/^Cpus_allowed_list/{print $2}' "$t/status" 2>/dev/null) || continue
    [ -z "$on" ] || [ "$on" = "$cpu" ] || off=$((off + 1))
  done
  if [ "$off" -gt 0 ]; then
    echo "$label: $off server thread(s) not on CPU $cpu" >&2
    stop_server
    exit 1
  fi
}

stop_server() {
  kill "$SPID" 2>/dev/null || true
  wait "$SPID" 2>/dev/null || true
  sleep 1
}

cpu_ticks() { sed 's/.*) //' "/proc/$SPID/stat" | awk '{print $12 + $13}'; }
idle_ticks() { awk '/^cpu /{print $5 + $6}' /proc/stat; }
mem_kb() { awk '/^Rss:/{r=$2} /^Pss:/{p=$2} END{print r, p}' "/proc/$SPID/smaps_rollup"; }

# measure LABEL QUERIES CLIENT_PIN DNSPERF_ARGS...
measure() {
  local label=$1 queries=$2 cpin=$3; shift 3
  local cset=()
  [ "$cpin" = yes ] && cset=(taskset -c "$CLIENT_CPU")
  read -r rss0 pss0 < <(mem_kb)
  local c0 c1 i0 w0 i1 w1 busy
  c0=$(cpu_ticks); i0=$(idle_ticks); w0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$B/results/$label.ctime" "${cset[@]}" \
    dnsperf -s 127.0.0.1 -p "$SPORT" -d "$queries" "$@" > "$B/results/$label.dnsperf" 2>&1
  c1=$(cpu_ticks); i1=$(idle_ticks); w1=$(date +%s.%N)
  read -r rss1 pss1 < <(mem_kb)
  local hz; hz=$(getconf CLK_TCK)
  busy=$(echo "$w0 $w1 $(getconf _NPROCESSORS_ONLN) $hz $i0 $i1" | awk '{printf "%d", ($2 - $1) * $3 * $4 - ($6 - $5)}')
  echo "$label $(( c1 - c0 )) $busy $hz $rss0 $pss0 $rss1 $pss1 $(cat "$B/results/$label.ctime")" > "$B/results/$label.meta"
}

row() {
  local label=$1 f=$B/results/$1.dnsperf m
  read -r _ sticks bticks hz rss0 pss0 rss1 pss1 cu cs < "$B/results/$label.meta"
  local qps comp ncomp avg codes scpu eff bg pct="-"
  qps=$(awk '/Queries per second/{printf "%.0f", $4}' "$f")
  comp=$(awk '/Queries completed/{print $4}' "$f" | tr -d '()')
  ncomp=$(awk '/Queries completed/{print $3}' "$f")
  avg=$(awk '/Average Latency/{printf "%.3f", $4 * 1000}' "$f")
  codes=$(awk '/Response codes/{$1=$2=""; gsub(/^ +/, ""); print}' "$f")
  scpu=$(echo "scale=2; $sticks / $hz" | bc)
  eff=$(echo "$ncomp $scpu" | awk '{ if ($2 > 0) printf "%.0f", $1 / $2; else print "-" }')
  bg=$(echo "$bticks $sticks $hz $cu $cs" | awk '{printf "%.1f", ($1 - $2) / $3 - $4 - $5}')
  if grep -q '^> ' "$f"; then
    pct=$(grep '^> ' "$f" | awk '{print $NF}' | sort -g | awk '{a[NR]=$1} END{printf "%.3f / %.3f / %.3f", a[int(NR*0.5)]*1000, a[int(NR*0.99)]*1000, a[int(NR*0.999)]*1000}')
  fi
  printf '| %s | %s | %s | %s | **%s** | %s | %s | %s | %.1f / %.1f | %.1f / %.1f | %s |\n' \
    "$label" "$qps" "$comp" "$scpu" "$eff" "$avg" "$pct" "$bg" \
    "$(echo "$rss0 / 1024" | bc -l)" "$(echo "$pss0 / 1024" | bc -l)" \
    "$(echo "$rss1 / 1024" | bc -l)" "$(echo "$pss1 / 1024" | bc -l)" "$codes"
}

LABELS=()
# 1. The headline comparison, alternating servers so all see the same background load:
#    ROUNDS x (tideway, knot, floor), pinned: saturating, then at the fixed rate.
ROUND_LABELS=()
for r in $(seq 1 "$ROUNDS"); do
  for S in tideway knot tideway-floor; do
    [[ " $SERVERS " == *" $S "* ]] || continue
    start_server "$S" 1 yes "$S-pin1-r$r"
    measure "$S-pin1-q500-r$r" "$B/queries.txt" yes -l "$DURATION" -c 4 -T 1 -q 500
    ROUND_LABELS+=("$S-pin1-q500-r$r")
    measure "$S-pin1-Q$RATE-r$r" "$B/queries.txt" yes -l "$DURATION" -c 4 -T 1 -q 500 -Q "$RATE" -v
    ROUND_LABELS+=("$S-pin1-Q$RATE-r$r")
    if [ "$S" = tideway ] && [ "$r" = 1 ]; then
      grep -o 'millis=[0-9.]*' "$B/results/$S-pin1-r$r.server.log" | head -1 | sed 's/millis=/index build ms: /' > "$B/results/index-build.txt" || true
    fi
    stop_server
  done
done
# 2. Everything else once per server.
for S in $SERVERS; do
  [ "$S" = tideway-floor ] && continue
  start_server "$S" 1 yes "$S-pin1"
  if [ "$S" != tideway ] && [ "$S" != knot ]; then
    measure "$S-pin1-q500" "$B/queries.txt" yes -l "$DURATION" -c 4 -T 1 -q 500; LABELS+=("$S-pin1-q500")
    measure "$S-pin1-Q$RATE" "$B/queries.txt" yes -l "$DURATION" -c 4 -T 1 -q 500 -Q "$RATE" -v; LABELS+=("$S-pin1-Q$RATE")
  fi
  if [ "$S" = tideway ] || [ "$S" = knot ]; then
    measure "$S-pin1-q500-POSONLY" "$B/q-positive.txt" yes -l 10 -c 4 -T 1 -q 500; LABELS+=("$S-pin1-q500-POSONLY")
    measure "$S-pin1-q500-NXONLY" "$B/q-nx.txt" yes -l 10 -c 4 -T 1 -q 500; LABELS+=("$S-pin1-q500-NXONLY")
  fi
  stop_server
  [ "$S" = tideway ] || [ "$S" = knot ] || continue
  start_server "$S" 2 no "$S-w2"
  measure "$S-w2-q500" "$B/queries.txt" no -l "$DURATION" -c 4 -T 2 -q 500; LABELS+=("$S-w2-q500")
  stop_server
done

# Same answers? Compare a few answer sections between the two servers.
if [[ "$SERVERS" == *tideway* && "$SERVERS" == *knot* ]]; then
  start_server knot 1 no check-knot; KPID=$SPID
  start_server tideway 1 no check-tideway; TPID=$SPID
  for q in "svc-5.ns-7.svc.cluster.local A" "_http._tcp.svc-9.ns-3.svc.cluster.local SRV" \
           "hl-3.ns-42.svc.cluster.local A" "nosuch.ns-1.svc.cluster.local A" "svc-1.ns-2.ns-3.svc.cluster.local A"; do
    # Response code and answer section (records sorted; the SOA serial differs by design).
    # shellcheck disable=SC2086
    a=$( (dig @127.0.0.1 -p $KNOT_PORT +noall +comments $q | grep -o 'status: [A-Z]*'; dig @127.0.0.1 -p $KNOT_PORT +noall +answer $q | sort) )
    # Asked once before without a cookie, so the answers compared are replayed copies.
    # shellcheck disable=SC2086
    dig @127.0.0.1 -p $TW_PORT +nocookie $q > /dev/null
    # shellcheck disable=SC2086
    b=$( (dig @127.0.0.1 -p $TW_PORT +nocookie +noall +comments $q | grep -o 'status: [A-Z]*'; dig @127.0.0.1 -p $TW_PORT +nocookie +noall +answer $q | sort) )
    if [ "$a" = "$b" ]; then echo "same answer: $q" >&2; else printf 'DIFFERENT answer: %s\n%s\n--\n%s\n' "$q" "$a" "$b" >&2; fi
  done
  kill "$KPID" "$TPID"; wait "$KPID" "$TPID" 2>/dev/null || true
fi

ratio() { echo "$1 $2" | awk '{printf "%.2f", $1 / $2}'; }
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
median_field() { sed "$1" "$B/results/rounds.txt" | median; }
fixed_cpu() { read -r _ t _ hz _ < "$B/results/$1.meta"; echo "$t $hz" | awk '{printf "%.2f\n", $1 / $2}'; }
fixed_p99() { grep '^> ' "$B/results/$1.dnsperf" | awk '{print $NF}' | sort -g | awk '{a[NR]=$1} END{printf "%.3f\n", a[int(NR*0.99)]*1000}'; }
eff() { awk '/Queries completed/{print $3}' "$B/results/$1.dnsperf" | { read -r n; read -r _ t _ hz _ < "$B/results/$1.meta"; echo "$n $t $hz" | awk '{printf "%.0f", $1 / ($2 / $3)}'; }; }
{
  echo "| run | QPS | completed | server CPU s | answers per server CPU-s | avg ms | p50 / p99 / p99.9 ms | background CPU s | RSS / PSS MB before | RSS / PSS MB after | response codes |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for l in "${ROUND_LABELS[@]}" "${LABELS[@]}"; do row "$l"; done
  echo
  if [[ " $SERVERS " == *" tideway "* && " $SERVERS " == *" knot "* ]]; then
    for r in $(seq 1 "$ROUNDS"); do
      t=$(eff "tideway-pin1-q500-r$r"); k=$(eff "knot-pin1-q500-r$r")
      line="round $r: tideway $t, knot $k answers per server CPU-s, ratio $(ratio "$t" "$k")"
      if [[ " $SERVERS " == *" tideway-floor "* ]]; then
        f=$(eff "tideway-floor-pin1-q500-r$r")
        line="$line; floor $f, tideway / floor $(ratio "$t" "$f")"
      fi
      echo "$line"
    done | tee "$B/results/rounds.txt"
    echo "median ratio to knot: $(median_field 's/.*knot [0-9]* answers per server CPU-s, ratio \([0-9.]*\).*/\1/')"
    if [[ " $SERVERS " == *" tideway-floor "* ]]; then
      echo "median ratio to the floor: $(median_field 's/.*tideway \/ floor \([0-9.]*\).*/\1/')"
    fi
    for S in tideway knot tideway-floor; do
      [[ " $SERVERS " == *" $S "* ]] || continue
      cpu=$(for r in $(seq 1 "$ROUNDS"); do fixed_cpu "$S-pin1-Q$RATE-r$r"; done | median)
      p99=$(for r in $(seq 1 "$ROUNDS"); do fixed_p99 "$S-pin1-Q$RATE-r$r"; done | median)
      echo "$S at $RATE QPS: median server CPU s $cpu, median p99 ms $p99"
    done
  fi
  cat "$B/results/index-build.txt" 2>/dev/null || true
  echo "knotd $(dpkg-query -W -f='${Version}' knot), dnsperf $(dpkg-query -W -f='${Version}' dnsperf), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
} | tee "$B/results/table.md"
