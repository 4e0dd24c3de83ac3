# Every kernel level's bits as tests pin them (gemm_digest LEVEL --nan-canonical: 300 matmuls, one
# digest; test_digest.sh says why), for the tests that check them: test_digest.sh on this CPU,
# test_emulated_cpus.sh on emulated ones. amx: to be pinned on an AMX CPU.
declare -A PINNED=([ref]=bd0a8517d63b2440 [avx2]=897194de1d3e4cc8 [avx512]=abb8892cc90ea9e0)
# The same with --sample (48 of the 300: every chosen shape once, every 8th random case), the list an
# emulated CPU runs in a tenth of the time; test_digest.sh checks these beside the whole list's.
declare -A PINNED_SAMPLE=([ref]=8f64e2d4016f0e6b [avx2]=37fa7a129d4df9c6 [avx512]=f6286db1cca8b9b7)
