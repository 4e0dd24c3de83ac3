#!/usr/bin/env bash
# Several "hosts" on this machine, for running a2amm across a network with
# mpirun: network namespaces joined by veth pairs to a bridge in a switch
# namespace, each with its own address, hostname and hosts file.
#
#   netns-hosts.sh up PREFIX N SUBNET   makes PREFIX-sw and hosts PREFIX-h1..hN
#                                       at SUBNET.1..N (SUBNET like 10.78.5),
#                                       and PREFIX-agent, mpirun's plm_rsh_agent
#   netns-hosts.sh down PREFIX          kills everything in them and removes them
#   netns-hosts.sh rate PREFIX N RATE   limits every link to RATE (tc tbf: 10gbit,
#                                       1gbit...), or lifts the limit with RATE=none
#   netns-hosts.sh exec PREFIX-hI CMD   runs CMD as host PREFIX-hI (its hostname too)
# Needs root (ip netns). Leaves nothing behind after down.
set -eu
cmd=${1:?usage: netns-hosts.sh up|down|rate|exec ...}
here=$(cd "$(dirname "$0")" && pwd)

case $cmd in
up)
    p=${2:?prefix}; n=${3:?number of hosts}; net=${4:?subnet like 10.78.5}
    ip netns add "$p-sw"
    ip -n "$p-sw" link add br0 type bridge
    ip -n "$p-sw" link set br0 up
    ip -n "$p-sw" link set lo up
    hosts=$(mktemp)
    for i in $(seq "$n"); do echo "$net.$i $p-h$i" >> "$hosts"; done
    echo "127.0.0.1 localhost" >> "$hosts"
    for i in $(seq "$n"); do
        h=$p-h$i
        ip netns add "$h"
        ip -n "$p-sw" link add "p$i" type veth peer name eth0 netns "$h"
        ip -n "$p-sw" link set "p$i" master br0 up
        ip -n "$h" addr add "$net.$i/24" dev eth0
        ip -n "$h" link set eth0 up
        ip -n "$h" link set lo up
        mkdir -p "/etc/netns/$h"
        cp "$hosts" "/etc/netns/$h/hosts"
    done
    rm -f "$hosts"
    # mpirun's agent: called like ssh (host, then the command's words), it runs them as that host
    cat > "/tmp/$p-agent" <<AGENT
#!/bin/sh
h=\$1; shift
exec ip netns exec "\$h" unshare --uts sh -c "hostname \$h; exec \$*"
AGENT
    chmod +x "/tmp/$p-agent"
    ;;
down)
    p=${2:?prefix}
    for ns in $(ip netns list | awk '{print $1}' | grep "^$p-" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    done
    sleep 0.2
    for ns in $(ip netns list | awk '{print $1}' | grep "^$p-" || true); do
        ip netns del "$ns" 2>/dev/null || true
        rm -rf "/etc/netns/$ns"
    done
    rm -f "/tmp/$p-agent"
    ;;
rate)
    p=${2:?prefix}; n=${3:?number of hosts}; rate=${4:?rate or none}
    for i in $(seq "$n"); do
        for end in "$p-sw p$i" "$p-h$i eth0"; do
            set -- $end
            ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null || true
            [ "$rate" = none ] || ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$rate" burst 1mb latency 10ms
        done
    done
    ;;
exec)
    h=${2:?host}; shift 2
    exec ip netns exec "$h" unshare --uts sh -c "hostname $h; exec \"\$@\"" sh "$@"
    ;;
*) echo "netns-hosts.sh: unknown command $cmd" >&2; exit 2 ;;
esac
