# Every kernel level's bits as tests pin them (gemm_digest LEVEL --nan-canonical: 300 matmuls, one
# digest; test_digest.sh says why), for the tests that check them: test_digest.sh on this CPU,
# test_emulated_cpus.sh on emulated ones. amx: to be pinned on an AMX CPU.
declare -A PINNED=([ref]=bd0a8517d63b2440 [avx2]=897194de1d3e4cc8 [avx512]=abb8892cc90ea9e0)
