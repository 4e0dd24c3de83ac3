/*
 * AMX-BF16 microkernel: a 32 x 64 block of C as two 32 x 32 halves, each
 * 2 x 2 tiles of 16 x 16 fp32 (tmm0-3) fed by two A tiles (tmm4-5: 16 rows x
 * 16 K-pairs) and two B tiles (tmm6-7: 16 K-pairs x 16 columns): four loads
 * per four TDPBF16PS, the most reuse eight tile registers allow.
 *
 * The packed panels need no layout of their own: a B tile is 16 consecutive
 * K-pairs of 16 columns of a panel (row stride 256 bytes), an A tile 16
 * packed rows' dwords of 16 K-pairs (row stride lda * 4).
 */
#include "gemm/gemm_amx.h"

#include "common/cpu.h"

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
    if (!cpu_has(CPU_AMX_TILE) || !cpu_has(CPU_AMX_BF16)) return 0;
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

AMX_TARGET void gemm_amx_block(const uint32_t *const *a, int64_t lda, const uint32_t *const *b, const int64_t *kpairs,
                               int chunks, const float *c_in, int64_t ldc_in, float *c_out, int64_t ldc_out,
                               const char *prefetch, const char *prefetch_end)
{
    const int64_t a_stride = lda * 4, b_stride = 64 * 4, in_stride = ldc_in * 4, out_stride = ldc_out * 4;
    /* lines to prefetch per step: the range spread over both halves' steps */
    int64_t steps = 0;
    for (int i = 0; i < chunks; i++) steps += kpairs[i] / 16;
    const int64_t lines = (prefetch_end - prefetch + 63) / 64;
    const int64_t per_step = steps ? (lines + 2 * steps - 1) / (2 * steps) : 0;
    for (int h = 0; h < 2; h++) {
        if (c_in) {
            const float *ci = c_in + 32 * h;
            _tile_loadd(0, ci, in_stride);
            _tile_loadd(1, ci + 16, in_stride);
            _tile_loadd(2, ci + 16 * ldc_in, in_stride);
            _tile_loadd(3, ci + 16 * ldc_in + 16, in_stride);
        } else {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
        }
        for (int i = 0; i < chunks; i++) {
            const uint32_t *a0 = a[i], *a1 = a[i] + 16 * lda, *bh = b[i] + 32 * h;
            for (int64_t kp = 0; kp < kpairs[i]; kp += 16) {
                for (int64_t l = 0; l < per_step && prefetch < prefetch_end; l++, prefetch += 64)
                    _mm_prefetch(prefetch, _MM_HINT_T1);
                _tile_loadd(4, a0 + kp, a_stride);
                _tile_loadd(6, bh + kp * 64, b_stride);
                _tile_loadd(7, bh + kp * 64 + 16, b_stride);
                _tile_loadd(5, a1 + kp, a_stride);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
        float *co = c_out + 32 * h;
        _tile_stored(0, co, out_stride);
        _tile_stored(1, co + 16, out_stride);
        _tile_stored(2, co + 16 * ldc_out, out_stride);
        _tile_stored(3, co + 16 * ldc_out + 16, out_stride);
    }
}
