#!/usr/bin/env bash
# The op over Open MPI across R network-namespace hosts at several link
# rates (tc tbf on every veth): `a2amm bench op`'s fused, unfused, matmul
# alone, AllToAll alone and baseline medians, one line per rate. The
# baseline is what users write: for alltoall-matmul MPI_Alltoall +
# dequantize + oneDNN's matmul with packed weights; for matmul-alltoall
# dequantize + that matmul, then MPI_Alltoall of the result's column blocks.
# Root only.
#   scripts/bench-mpi-netns.sh [--op alltoall-matmul|matmul-alltoall] A2AMM M K N R [RATES...]
#   (RATES: none 25gbit 10gbit 1gbit; --op: the seed's op, alltoall-matmul, by default)
# ITERS=N repetitions (10); THREADS=T compute threads per rank (the hosts share
# this machine's cores: give cores / R); MPI_EXTRA="--mca ..." more mpirun options.
# RUN_EXTRA="--tile-m 64 --depth 8": more options of a2amm bench op. TABLE=1: bench op's whole
# table per rate (with the per-rank breakdown) instead of the one line.
set -eu
op=alltoall-matmul
if [ "${1:-}" = --op ]; then op=${2:?--op needs alltoall-matmul or matmul-alltoall}; shift 2; fi
case $op in alltoall-matmul | matmul-alltoall) ;; *) echo "bench-mpi-netns.sh: --op must be alltoall-matmul or matmul-alltoall, got '$op'" >&2; exit 2 ;; esac
a2amm=$(realpath "${1:?usage: bench-mpi-netns.sh [--op OP] A2AMM M K N R [RATES...]}"); M=$2; K=$3; N=$4; R=$5; shift 5
rates=${*:-none 25gbit 10gbit 1gbit}
here=$(cd "$(dirname "$0")" && pwd)
P=a2b$$; NET=10.79.$(( $$ % 200 + 20 ))
trap 'bash "$here/netns-hosts.sh" down $P' EXIT
bash "$here/netns-hosts.sh" up $P "$R" "$NET"
list=$(seq -s, -f "$P-h%g" "$R")
echo "op $op, M=$M K=$K N=$N R=$R (medians in ms of the slowest rank)"
[ -n "${TABLE:-}" ] || printf "%-8s %10s %10s %10s %10s %10s %8s %8s\n" rate fused_ms unfused_ms matmul_ms a2a_ms base_ms f/max base/f
# bench_op [--json]: bench op across the hosts, its table or its JSON
bench_op() {
    bash "$here/netns-hosts.sh" exec $P-h1 mpirun --allow-run-as-root --oversubscribe -np "$R" --host "$list" --bind-to none \
        --mca plm_rsh_agent /tmp/$P-agent --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" \
        --mca oob_tcp_if_include "$NET.0/24" ${MPI_EXTRA:-} "$a2amm" bench op "$M" "$K" "$N" "$R" --op "$op" \
        --iters "${ITERS:-10}" --transport mpi "$@" ${THREADS:+--threads $THREADS} ${RUN_EXTRA:-} </dev/null 2>/dev/null
}
for rate in $rates; do
    bash "$here/netns-hosts.sh" rate $P "$R" "$rate"
    if [ -n "${TABLE:-}" ]; then
        echo "== $rate"
        bench_op | sed -n '/min ms/,$p'
        continue
    fi
    bench_op --json | python3 -c "
import json,sys
o=json.loads(sys.stdin.read().strip().splitlines()[-1])
f,u,m,a,b=(o[k]['median_s']*1e3 for k in ('run','unfused','matmul','alltoall','baseline'))
print('%-8s %10.2f %10.2f %10.2f %10.2f %10.2f %8.3f %8.2f'%('$rate',f,u,m,a,b,f/max(m,a),b/f))"
done
