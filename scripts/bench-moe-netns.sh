#!/usr/bin/env bash
# The MoE op over Open MPI across R network-namespace hosts at several link
# rates (tc tbf on every veth): `a2amm bench moe`'s table per rate (the op's
# call, its experts alone, (1) gather + reduce-scatter, (2) alltoallv + oneDNN
# experts, the read of the experts), every exchange an MPI message. Root only.
#   scripts/bench-moe-netns.sh A2AMM R T H I E K [RATES...]   (RATES: none 10gbit 1gbit)
# ITERS=N repetitions (5); THREADS=T compute threads a rank (the hosts share this
# machine's cores: give cores / R); EXTRA="--skew": more options of bench moe.
set -eu
a2amm=$(realpath "${1:?usage: bench-moe-netns.sh A2AMM R T H I E K [RATES...]}"); R=$2; T=$3; H=$4; I=$5; E=$6; K=$7
shift 7
rates=${*:-none 10gbit 1gbit}
here=$(cd "$(dirname "$0")" && pwd)
P=a2m$$; NET=10.77.$(( $$ % 200 + 20 ))
trap 'bash "$here/netns-hosts.sh" down $P' EXIT
bash "$here/netns-hosts.sh" up $P "$R" "$NET"
list=$(seq -s, -f "$P-h%g" "$R")
for rate in $rates; do
    bash "$here/netns-hosts.sh" rate $P "$R" "$rate"
    echo "== link rate $rate, R=$R hosts (one rank each)"
    bash "$here/netns-hosts.sh" exec $P-h1 mpirun --allow-run-as-root --oversubscribe -np "$R" --host "$list" --bind-to none \
        --mca plm_rsh_agent /tmp/$P-agent --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" \
        --mca oob_tcp_if_include "$NET.0/24" "$a2amm" bench moe "$R" "$T" "$H" "$I" "$E" "$K" --transport mpi \
        --iters "${ITERS:-5}" ${THREADS:+--threads $THREADS} ${EXTRA:-} </dev/null 2>/dev/null | sed -n '/min ms/,$p'
done
