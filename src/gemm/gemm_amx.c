/*
 * AMX-BF16 microkernel: a 32 x 64 block of sums as two 32 x 32 halves, each
 * 2 x 2 tiles of 16 x 16 fp32 (tmm0-3) fed by two A tiles (tmm4-5: 16 rows x
 * 16 K-pairs) and two B tiles (tmm6-7: 16 K-pairs x 16 columns): four loads
 * per four TDPBF16PS, the most reuse eight tile registers allow.
 *
 * The packed panels need no layout of their own: a B tile is 16 consecutive
 * K-pairs of 16 columns of a panel (row stride 256 bytes), an A tile 16
 * packed rows' dwords of 16 K-pairs (row stride lda * 4).
 */
#include "gemm/gemm_amx.h"

#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

/* Linux's arch_prctl request for the tile data state (asm/prctl.h, not in every libc's headers). */
enum { ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };

static pthread_once_t grant_once = PTHREAD_ONCE_INIT;
static int granted;

static void request_tiles(void)
{
#if defined(__x86_64__) && defined(SYS_arch_prctl)
    granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) == 0;
#endif
}

int gemm_amx_usable(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return 0;
    pthread_once(&grant_once, request_tiles);
    return granted;
}

/* Palette 1: tiles 0-7 of 16 rows of 64 bytes. */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/*
 * A global, not a local: GCC 12 sees only the first 16 bytes of a local
 * read by _tile_loadconfig and drops the stores to the rest.
 */
static const tile_config CONFIG __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

AMX_TARGET void gemm_amx_begin(void) { _tile_loadconfig(&CONFIG); }

AMX_TARGET void gemm_amx_end(void) { _tile_release(); }

AMX_TARGET void gemm_amx_group(const uint32_t *a, int64_t lda, const uint32_t *b, int64_t kpairs, float *sums,
                               const char *prefetch, const char *prefetch_end)
{
    const int64_t a_stride = lda * 4, b_stride = 64 * 4, s_stride = 64 * 4;
    const uint32_t *a1 = a + 16 * lda;
    /* lines to prefetch per step: the range spread over both halves' steps */
    const int64_t steps = kpairs / 16, lines = (prefetch_end - prefetch + 63) / 64;
    const int64_t per_step = (lines + 2 * steps - 1) / (2 * steps);
    for (int h = 0; h < 2; h++) {
        const uint32_t *bh = b + 32 * h;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t kp = 0; kp < kpairs; kp += 16) {
            for (int64_t l = 0; l < per_step && prefetch < prefetch_end; l++, prefetch += 64)
                _mm_prefetch(prefetch, _MM_HINT_T1);
            _tile_loadd(4, a + kp, a_stride);
            _tile_loadd(6, bh + kp * 64, b_stride);
            _tile_loadd(7, bh + kp * 64 + 16, b_stride);
            _tile_loadd(5, a1 + kp, a_stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        float *s = sums + 32 * h;
        _tile_stored(0, s, s_stride);
        _tile_stored(1, s + 16, s_stride);
        _tile_stored(2, s + 16 * 64, s_stride);
        _tile_stored(3, s + 16 * 64 + 16, s_stride);
    }
}

