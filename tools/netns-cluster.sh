#!/usr/bin/env bash
# A cluster of N "nodes" on one Linux machine, for running onnx-pipetrain under MPI across a real
# network stack: each node is a network namespace (and a UTS namespace: `hostname` is the node's
# name, so the ranks see N hosts) joined by a veth pair to a bridge in the root namespace, with
# an address from TEST-NET-1 (192.0.2.0/24) that exists only there. Needs root, iproute2 (ip, tc)
# and util-linux (unshare); `run` needs OpenMPI's mpirun. docs/mpi.md ("Nodes on one machine").
#
#   tools/netns-cluster.sh up N [SLOTS] [--split-cores]
#                                              make nodes <prefix>0..N-1 (SLOTS ranks each, default 2);
#                                              a set left from before is removed first; --split-cores:
#                                              each node's processes run on cores of their own (node k
#                                              gets the k-th of N equal shares of this machine's cores,
#                                              as separate machines would), else every node on all
##   tools/netns-cluster.sh down                remove everything `up` made (processes in the nodes: SIGKILL)
#   tools/netns-cluster.sh exec NODE CMD...    run CMD inside a node (NODE: its name or its number)
#   tools/netns-cluster.sh run MPIRUN-ARGS -- CMD...
#                                              mpirun across the nodes: ranks fill node 0's slots, then
#                                              node 1's...; daemons started with `ip netns exec`;
#                                              TCP only (no shared memory), on the nodes' subnet
#   tools/netns-cluster.sh kill NODE           SIGKILL every process in the node's network namespace
#   tools/netns-cluster.sh shape RATE DELAY    every node sends at RATE with DELAY (tc netem on its
#                                              link's node end: each direction of a node-to-node path
#                                              is shaped once), e.g. `shape 10gbit 50us`; `shape off`.
#                                              Without netem in the kernel: the rate alone (tbf), and
#                                              a warning
#   tools/netns-cluster.sh cut NODE            take the node's link down (its bridge end: nothing in
#                                              or out; its processes and their local traffic go on)
#   tools/netns-cluster.sh heal NODE           bring it back up
#   tools/netns-cluster.sh quickack on|off     every node acknowledges TCP data at once (the route's
#                                              quickack) instead of delaying acknowledgements up to 40 ms
#   tools/netns-cluster.sh status              the nodes, their addresses, links, shaping, processes
#
# Environment: PT_NETNS_PREFIX (node names, default pt-node), PT_NETNS_SUBNET (first three octets
# of a /24: node k is .k+1, the bridge .254; default the first of TEST-NET-1, -2, -3, i.e.
# 192.0.2, 198.51.100, 203.0.113, that no interface here uses), PT_NETNS_BRIDGE (default pt-br0),
# PT_NETNS_STATE (default /run/netns-cluster). Two sets may coexist with different prefixes and
# bridges (tests/mpi/test_netns.py uses its own); `up` records the subnet for the other commands.
set -euo pipefail

prefix=${PT_NETNS_PREFIX:-pt-node}
bridge=${PT_NETNS_BRIDGE:-pt-br0}
state=${PT_NETNS_STATE:-/run/netns-cluster}/$prefix
subnet=${PT_NETNS_SUBNET:-}
if [ -z "$subnet" ] && [ -f "$state/subnet" ]; then subnet=$(cat "$state/subnet"); fi
me=$(basename "$0")

die() { echo "$me: $*" >&2; exit 2; }
usage() { sed -n '/^#   tools/,/^#$/p' "$0" | sed 's/^#//' >&2; exit 2; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, veth pairs, a bridge, tc)"
  command -v ip >/dev/null || die "ip not found (Debian: iproute2)"
}

num_nodes() { [ -f "$state/nodes" ] && cat "$state/nodes" || echo 0; }

# NODE as a name or a number -> the namespace's name.
node_name() {
  local n=$1 count
  count=$(num_nodes)
  [ "$count" -gt 0 ] || die "no nodes: run '$me up N' first"
  if [[ $n =~ ^[0-9]+$ ]]; then n=$prefix$n; fi
  local k=${n#"$prefix"}
  [[ $k =~ ^[0-9]+$ ]] && [ "$k" -lt "$count" ] || die "no node $1 (nodes: ${prefix}0..${prefix}$((count - 1)))"
  echo "$n"
}

# The bridge end of node k's veth pair carries the node's name (interfaces and namespaces have
# separate name spaces); the node end is eth0.
host_if() { echo "$1"; }

remove_set() {
  # Everything a set with this prefix may have left, whether `up` finished or not; interfaces
  # only when they are ours (a veth on our bridge or with its other end in a node, our bridge).
  local ns link
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}[0-9]+$" || true); do
    kill_node_procs "$ns"
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
                grep -E "^${prefix}[0-9]+n?$" || true); do
    if ip -o link show dev "$link" 2>/dev/null | grep -qE "master $bridge |link-netns ${prefix}[0-9]+|@${prefix}[0-9]+n?:"; then
      ip link del "$link" 2>/dev/null || true
    fi
  done
  if ip -d -o link show dev "$bridge" 2>/dev/null | grep -q " bridge "; then ip link del "$bridge" || true; fi
  rm -rf "$state"
}

kill_node_procs() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null || true)
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -9 $pids 2>/dev/null || true
  for _ in $(seq 50); do
    [ -z "$(ip netns pids "$1" 2>/dev/null || true)" ] && return 0
    sleep 0.02
  done
}

cmd_up() {
  need_root
  local split=0 a pos=()
  for a in "$@"; do
    case $a in
      --split-cores) split=1 ;;
      -*) die "up: unknown option '$a' (--split-cores)" ;;
      *) pos+=("$a") ;;
    esac
  done
  local n=${pos[0]:-} slots=${pos[1]:-2}
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] || die "up N: N must be 1..250 nodes"
  [[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "up N SLOTS: SLOTS must be a positive number"
  local cores
  cores=$(nproc)
  [ "$split" = 0 ] || [ "$cores" -ge "$n" ] ||
    die "up $n --split-cores: this machine has $cores cores, fewer than one per node"
  [ ${#prefix} -le 12 ] || die "PT_NETNS_PREFIX '$prefix': at most 12 characters (interface names)"
  remove_set
  subnet=${PT_NETNS_SUBNET:-}
  if [ -z "$subnet" ]; then
    for s in 192.0.2 198.51.100 203.0.113; do
      ip -4 -o addr show | grep -q " inet ${s//./\\.}\." || { subnet=$s; break; }
    done
    [ -n "$subnet" ] || die "192.0.2.0/24, 198.51.100.0/24 and 203.0.113.0/24 are all in use here; set PT_NETNS_SUBNET"
  elif ip -4 -o addr show | grep -q " inet ${subnet//./\\.}\."; then
    die "$subnet.0/24 is already in use here (ip -4 addr); set PT_NETNS_SUBNET to another /24"
  fi
  # A half-made set is removed when any step fails.
  trap 'rc=$?; if [ $rc -ne 0 ]; then echo "$me: up failed; removing what was made" >&2; remove_set; fi' EXIT
  mkdir -p "$state"
  echo "$subnet" >"$state/subnet"
  ip link add "$bridge" type bridge
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  local k ns
  for ((k = 0; k < n; k++)); do
    ns=$prefix$k
    ip netns add "$ns"
    ip link add "$(host_if "$ns")" type veth peer name "${prefix}${k}n"
    ip link set "${prefix}${k}n" netns "$ns"
    ip -n "$ns" link set "${prefix}${k}n" name eth0
    ip -n "$ns" addr add "$subnet.$((k + 1))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "$(host_if "$ns")" master "$bridge"
    ip link set "$(host_if "$ns")" up
    echo "$ns slots=$slots" >>"$state/hostfile.tmp"
    # --split-cores: the node's cores (taskset's list), read by the agent.
    [ "$split" = 0 ] || echo "$((k * cores / n))-$(((k + 1) * cores / n - 1))" >"$state/cores.$ns"
  done
  mv "$state/hostfile.tmp" "$state/hostfile"
  # OpenMPI's launcher: `agent NODE orted ARGS...`, like `ssh NODE orted ARGS...` (one shell
  # command line run by the node's shell); the node gets its own hostname.
  cat >"$state/agent" <<EOF
#!/bin/sh
# plm_rsh_agent for the nodes of $me (made by '$me up'): runs a command line in node \$1.
node=\$1; shift
pin=
[ -f "$state/cores.\$node" ] && pin="taskset -c \$(cat "$state/cores.\$node")"
exec ip netns exec "\$node" \$pin unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$node" "\$*"
EOF
  chmod +x "$state/agent"
  echo "$slots" >"$state/slots"
  echo "$n" >"$state/nodes"
  # Every bridge port forwards before `up` says so (no STP: at once, normally).
  for ((k = 0; k < n; k++)); do
    for _ in $(seq 100); do
      bridge link show dev "$(host_if "$prefix$k")" | grep -q "state forwarding" && break
      sleep 0.05
    done
    bridge link show dev "$(host_if "$prefix$k")" | grep -q "state forwarding" ||
      die "the bridge does not forward for node $prefix$k"
  done
  trap - EXIT
  echo "$me: $n nodes ${prefix}0..${prefix}$((n - 1)) ($subnet.1..$subnet.$n, bridge $bridge $subnet.254), $slots slots each"
}

cmd_down() {
  need_root
  remove_set
}

cmd_exec() {
  need_root
  [ $# -ge 2 ] || usage
  local ns
  ns=$(node_name "$1")
  shift
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}

cmd_run() {
  need_root
  local mpirun=${PT_NETNS_MPIRUN:-mpirun}
  command -v "$mpirun" >/dev/null || die "mpirun not found (Debian: openmpi-bin)"
  [ "$(num_nodes)" -gt 0 ] || die "no nodes: run '$me up N' first"
  local args=() map=(--map-by slot)
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case $1 in --map-by | -map-by | --npernode | -npernode | --ppr) map=() ;; esac
    args+=("$1")
    shift
  done
  [ "${1:-}" = "--" ] || die "run MPIRUN-ARGS -- CMD...: no '--'"
  shift
  [ $# -ge 1 ] || die "run: no command after '--'"
  # --map-by slot with SLOTS per node (unless MPIRUN-ARGS map the ranks themselves, e.g.
  # `--map-by node` for one rank per node): ranks 0..SLOTS-1 on node 0, and so on. tcp,self: no shared
  # memory, also between the ranks of one node (every message crosses the node's network stack).
  # OOB (the daemons' control channel) and BTL bound to the nodes' subnet. No tree spawn: the
  # daemons are started by mpirun itself. --bind-to none and oversubscription: more ranks than cores.
  exec "$mpirun" --allow-run-as-root --oversubscribe --bind-to none \
    --hostfile "$state/hostfile" "${map[@]}" \
    --mca plm_rsh_agent "$state/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
    --mca rmaps_base_oversubscribe 1 \
    "${args[@]}" "$@"
}

cmd_kill() {
  need_root
  [ $# -eq 1 ] || usage
  kill_node_procs "$(node_name "$1")"
}

# RATE as tc writes it (10gbit, 500mbit, 1gbps...) -> bytes per second.
rate_bytes() {
  local v=${1,,} num unit
  num=${v%%[a-z]*}
  unit=${v#"$num"}
  [[ $num =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "shape: rate '$1': expected a number and a unit, e.g. 10gbit"
  case $unit in
    bit | "") f=0.125 ;; kbit) f=125 ;; mbit) f=125000 ;; gbit) f=125000000 ;; tbit) f=125000000000 ;;
    bps) f=1 ;; kbps) f=1000 ;; mbps) f=1000000 ;; gbps) f=1000000000 ;;
    *) die "shape: rate '$1': unknown unit '$unit' (bit, kbit, mbit, gbit, tbit, bps, kbps, mbps, gbps)" ;;
  esac
  awk -v n="$num" -v f="$f" 'BEGIN { printf "%.0f", n * f }'
}

cmd_shape() {
  need_root
  [ $# -ge 1 ] || usage
  local n k
  n=$(num_nodes)
  [ "$n" -gt 0 ] || die "no nodes: run '$me up N' first"
  if [ "$1" = "off" ]; then
    for ((k = 0; k < n; k++)); do tc -n "$prefix$k" qdisc del dev eth0 root 2>/dev/null || true; done
    rm -f "$state/shape"
    return 0
  fi
  [ $# -eq 2 ] || usage
  local rate=$1 delay=$2 bytes burst err
  bytes=$(rate_bytes "$rate")
  # The node end of each link: traffic from node a to node b is shaped once (at a), and b's
  # answer once (at b). limit: the packets netem may hold (its default, 1000, drops at high rates).
  if err=$(tc -n "${prefix}0" qdisc replace dev eth0 root netem rate "$rate" delay "$delay" limit 100000 2>&1); then
    for ((k = 1; k < n; k++)); do
      tc -n "$prefix$k" qdisc replace dev eth0 root netem rate "$rate" delay "$delay" limit 100000
    done
    echo "netem rate $rate delay $delay" >"$state/shape"
    return 0
  fi
  case $err in
    *"qdisc kind is unknown"*) ;;
    *) die "tc netem on ${prefix}0: $err" ;;
  esac
  # A kernel without netem (CONFIG_NET_SCH_NETEM): the rate alone, with a token bucket (tbf);
  # the delay cannot be emulated. Burst: 1 ms at the rate, at least 64 KiB (a GSO segment).
  burst=$((bytes / 1000))
  [ "$burst" -ge 65536 ] || burst=65536
  for ((k = 0; k < n; k++)); do
    tc -n "$prefix$k" qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
  done
  echo "tbf rate $rate (no delay: this kernel has no netem)" >"$state/shape"
  echo "$me: this kernel has no netem (CONFIG_NET_SCH_NETEM): the rate $rate is applied (tbf, burst $burst bytes), the delay $delay is not" >&2
}

cmd_cut() {
  need_root
  [ $# -eq 1 ] || usage
  ip link set "$(host_if "$(node_name "$1")")" down
}

cmd_heal() {
  need_root
  [ $# -eq 1 ] || usage
  ip link set "$(host_if "$(node_name "$1")")" up
}

cmd_quickack() {
  need_root
  [ $# -eq 1 ] && { [ "$1" = on ] || [ "$1" = off ]; } || die "quickack on|off"
  local n k ns
  n=$(num_nodes)
  [ "$n" -gt 0 ] || die "no nodes: run '$me up N' first"
  for ((k = 0; k < n; k++)); do
    ns=$prefix$k
    ip -n "$ns" route change "$subnet.0/24" dev eth0 proto kernel scope link src "$subnet.$((k + 1))" \
      quickack "$([ "$1" = on ] && echo 1 || echo 0)"
  done
}

cmd_status() {
  local n k ns
  n=$(num_nodes)
  if [ "$n" -eq 0 ]; then echo "no nodes (prefix $prefix)"; return 0; fi
  echo "bridge $bridge $subnet.254/24; hostfile $state/hostfile; agent $state/agent"
  for ((k = 0; k < n; k++)); do
    ns=$prefix$k
    local link qd procs
    link=cut
    ip -o link show "$(host_if "$ns")" 2>/dev/null | grep -q "state UP" && link=up
    qd=$(tc -n "$ns" qdisc show dev eth0 2>/dev/null | grep -oE "(netem|tbf) .*" | sed -E 's/ [0-9a-f]+: root refcnt [0-9]+//' || true)
    procs=$(ip netns pids "$ns" 2>/dev/null | wc -l || true)
    local pin="" qa=""
    [ -f "$state/cores.$ns" ] && pin="; cores $(cat "$state/cores.$ns")"
    ip -n "$ns" route show "$subnet.0/24" 2>/dev/null | grep -q "quickack 1" && qa="; quickack"
    echo "$ns $subnet.$((k + 1)) link $link${qd:+, $qd}; $procs processes$pin$qa"
  done
}

sub=${1:-}
[ -n "$sub" ] || usage
shift
case $sub in
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  exec) cmd_exec "$@" ;;
  run) cmd_run "$@" ;;
  kill) cmd_kill "$@" ;;
  shape) cmd_shape "$@" ;;
  cut) cmd_cut "$@" ;;
  heal) cmd_heal "$@" ;;
  quickack) cmd_quickack "$@" ;;
  status) cmd_status "$@" ;;
  -h | --help | help) usage ;;
  *) echo "$me: unknown command '$sub'" >&2; usage ;;
esac
