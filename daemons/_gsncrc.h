/* CRC-16 and micropacket primitives shared by daemons/_fastpath.c and daemons/_link.c
 * (see the comment at the top of _fastpath.c for the wire format and the maths).
 * Every function is static: each extension gets its own copy of the tables. */
#ifndef GSN_CRC_H
#define GSN_CRC_H
#include <stdint.h>
#include <string.h>
#include <Python.h>
#include <stdlib.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GSN_CLMUL 1
#include <immintrin.h>
#endif

#define MP_BYTES 40
#define MP_DATA 32
#define CRC_POLY 0x1021u
#define CRC_INIT 0xFFFFu
#define LINK_BITS 0x00FFFFFF00000000ull /* VCR | CR | RSEQ | TSEQ */
#define RSEQ_BITS 0x0000FF0000000000ull
#define GIL_MIN_MPS 64 /* release the GIL only for batches at least this long */

static uint16_t T[16][256];
static uint16_t M32[2][256], M6[2][256]; /* [0]: high byte, [1]: low byte */
static uint16_t M32K[3][2][256];          /* M32 applied 2, 3, 4 times (ecrc_run) */
static uint16_t K32;                      /* M32(0xFFFF) */
static uint64_t M32N[4][16];              /* M32 by nibbles: adv32(x) = XOR of M32N[k][nibble k of x] (_reasm.h) */
/* block_crc0 by carry-less multiply (PCLMULQDQ) instead of the tables, and block_crcs
 * (_crcvec.h) four blocks at a time by AVX-512 VPCLMULQDQ: chosen by init_tables() when
 * the CPU has them, unless GSN_CRC=tables or GSN_CRC=clmul; crc_use() switches (tests). */
static int crc_clmul, crc_vec;
static uint64_t KX208, KX144, KX80, MU80; /* x^n mod P; floor(x^80 / P) without its x^64 */
static uint64_t KL38; /* 0xFFFF x^304 mod P (lcrc_scan) */

static uint16_t advance_slow(uint16_t x, int nbytes)
{
    while (nbytes--) {
        for (int b = 0; b < 8; b++)
            x = (uint16_t)((x & 0x8000u) ? ((unsigned)x << 1) ^ CRC_POLY : (unsigned)x << 1);
    }
    return x;
}

#ifdef GSN_CLMUL
static int crc_vec_cpu(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("vpclmulqdq");
}
#endif

static void init_tables(void)
{
    for (int v = 0; v < 256; v++)
        T[0][v] = advance_slow((uint16_t)(v << 8), 1);
    for (int k = 1; k < 16; k++)
        for (int v = 0; v < 256; v++) {
            uint16_t x = T[k - 1][v];
            T[k][v] = (uint16_t)((x << 8) ^ T[0][x >> 8]);
        }
    for (int v = 0; v < 256; v++) {
        M32[0][v] = advance_slow((uint16_t)(v << 8), 32);
        M32[1][v] = advance_slow((uint16_t)v, 32);
        M6[0][v] = advance_slow((uint16_t)(v << 8), 6);
        M6[1][v] = advance_slow((uint16_t)v, 6);
    }
    for (int k = 0; k < 3; k++)
        for (int v = 0; v < 256; v++) {
            M32K[k][0][v] = advance_slow((uint16_t)(v << 8), 32 * (k + 2));
            M32K[k][1][v] = advance_slow((uint16_t)v, 32 * (k + 2));
        }
    K32 = advance_slow(CRC_INIT, 32);
    for (int k = 0; k < 4; k++) /* M32 is linear: its value on each nibble alone */
        for (int v = 0; v < 16; v++)
            M32N[k][v] = advance_slow((uint16_t)(v << (4 * k)), 32);
    KX208 = advance_slow(1, 26), KX144 = advance_slow(1, 18), KX80 = advance_slow(1, 10);
    KL38 = advance_slow(CRC_INIT, 38);
    unsigned __int128 num = (unsigned __int128)1 << 80, p = (1u << 16) | CRC_POLY, q = 0;
    for (int d = 80; d >= 16; d--) /* polynomial long division x^80 / P */
        if ((num >> d) & 1)
            num ^= p << (d - 16), q |= (unsigned __int128)1 << (d - 16);
    MU80 = (uint64_t)q;
    const char *want = getenv("GSN_CRC");
#ifdef GSN_CLMUL
    __builtin_cpu_init();
    crc_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1") &&
                !(want && !strcmp(want, "tables"));
    crc_vec = crc_clmul && crc_vec_cpu() && !(want && !strcmp(want, "clmul"));
#else
    (void)want;
#endif
}

/* Select "tables", "clmul" or "vpclmul" (if the CPU has it); the one in use. */
static const char *crc_use(const char *name)
{
#ifdef GSN_CLMUL
    if (name && (!strcmp(name, "clmul") || !strcmp(name, "vpclmul"))) {
        crc_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
        crc_vec = crc_clmul && !strcmp(name, "vpclmul") && crc_vec_cpu();
    }
#endif
    if (name && !strcmp(name, "tables"))
        crc_clmul = crc_vec = 0;
    return crc_vec ? "vpclmul" : crc_clmul ? "clmul" : "tables";
}

static inline uint16_t adv32(uint16_t x) { return M32[0][x >> 8] ^ M32[1][x & 0xFF]; }
static inline uint16_t adv6(uint16_t x) { return M6[0][x >> 8] ^ M6[1][x & 0xFF]; }

/* Register c fed with 16 bytes p[0..15]. */
static inline uint16_t slice16(uint16_t c, const uint8_t *p)
{
    return T[15][p[0] ^ (c >> 8)] ^ T[14][p[1] ^ (c & 0xFF)] ^ T[13][p[2]] ^ T[12][p[3]] ^
           T[11][p[4]] ^ T[10][p[5]] ^ T[9][p[6]] ^ T[8][p[7]] ^ T[7][p[8]] ^ T[6][p[9]] ^
           T[5][p[10]] ^ T[4][p[11]] ^ T[3][p[12]] ^ T[2][p[13]] ^ T[1][p[14]] ^ T[0][p[15]];
}

static inline uint64_t load_be64(const uint8_t *p);

/* Zero-init CRC of one 32-byte block by the tables; the two halves are independent. */
static inline uint16_t block_crc0_tables(const uint8_t *p)
{
    uint16_t hi = slice16(0, p), lo = slice16(0, p + 16);
    /* hi advanced by 16 zero bytes == slice16(hi, zeros) == T[15][hi>>8] ^ T[14][hi&0xFF] */
    return T[15][hi >> 8] ^ T[14][hi & 0xFF] ^ lo;
}

#ifdef GSN_CLMUL
/* The same by carry-less multiply.  The block is m = A x^192 + B x^128 + C x^64 + D (big-
 * endian 64-bit words: the first bit is the highest power) and its zero-init CRC is
 * m x^16 mod P.  S = A (x^208 mod P) + B (x^144 mod P) + C (x^80 mod P) + D x^16 has degree
 * < 80 and the same remainder; Barrett reduces it: q = floor(S/P) =
 * floor(floor(S/x^16) floor(x^80/P) / x^64) (exact over GF(2)), and the CRC is the low
 * 16 bits of S + q P, that is of S + q (P - x^16).  Five multiplies, no table. */
__attribute__((target("pclmul,sse4.1"))) static uint16_t block_crc0_clmul(const uint8_t *p)
{
    const uint64_t a = load_be64(p), b = load_be64(p + 8), c = load_be64(p + 16), d = load_be64(p + 24);
    const __m128i ab = _mm_set_epi64x((long long)b, (long long)a), k = _mm_set_epi64x((long long)KX144, (long long)KX208);
    __m128i s = _mm_xor_si128(_mm_clmulepi64_si128(ab, k, 0x00), _mm_clmulepi64_si128(ab, k, 0x11));
    s = _mm_xor_si128(s, _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)c), _mm_cvtsi64_si128((long long)KX80), 0));
    const uint64_t lo = (uint64_t)_mm_cvtsi128_si64(s) ^ (d << 16), hi = (uint64_t)_mm_extract_epi64(s, 1) ^ (d >> 48);
    const uint64_t top = (lo >> 16) | (hi << 48); /* floor(S / x^16) */
    const __m128i t = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)top), _mm_cvtsi64_si128((long long)MU80), 0);
    const uint64_t q = top ^ (uint64_t)_mm_extract_epi64(t, 1);
    const __m128i r = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)q), _mm_cvtsi64_si128(CRC_POLY), 0);
    return (uint16_t)(lo ^ (uint64_t)_mm_cvtsi128_si64(r));
}
#endif

/* Zero-init CRC of one 32-byte block. */
static inline uint16_t block_crc0(const uint8_t *p)
{
#ifdef GSN_CLMUL
    if (crc_clmul)
        return block_crc0_clmul(p);
#endif
    return block_crc0_tables(p);
}

/* Zero-init CRC of the first 6 bytes of a control word (bits 63..16). */
static inline uint16_t ctrl6_crc0(uint64_t ctrl)
{
    return T[5][(ctrl >> 56) & 0xFF] ^ T[4][(ctrl >> 48) & 0xFF] ^ T[3][(ctrl >> 40) & 0xFF] ^
           T[2][(ctrl >> 32) & 0xFF] ^ T[1][(ctrl >> 24) & 0xFF] ^ T[0][(ctrl >> 16) & 0xFF];
}

static inline uint16_t crc16_buf(uint16_t c, const uint8_t *p, Py_ssize_t n)
{
    while (n >= 16) {
        c = slice16(c, p);
        p += 16;
        n -= 16;
    }
    while (n--)
        c = (uint16_t)((c << 8) ^ T[0][(c >> 8) ^ *p++]);
    return c;
}

static inline uint64_t load_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void store_be64(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

static inline uint16_t lcrc_of(const uint8_t *mp, uint64_t ctrl)
{
    return adv6(K32 ^ block_crc0(mp)) ^ ctrl6_crc0(ctrl);
}

/* Rewrite the control word of one micropacket to ``neu`` (LCRC bits ignored),
 * fixing LCRC by linearity: a corrupt micropacket stays detectably corrupt. */
static inline void restamp_ctrl(uint8_t *mp, uint64_t neu)
{
    uint64_t old = load_be64(mp + MP_DATA);
    uint16_t lcrc = (uint16_t)old ^ ctrl6_crc0(old ^ neu);
    store_be64(mp + MP_DATA, (neu & ~0xFFFFull) | lcrc);
}


#include "_crcvec.h"

#define ENC_CHUNK 64 /* micropackets encoded per block_crcs call (2.5 KiB: stays in L1) */

/* Split the stream head[0:hl] + payload[0:pln], zero-filled, into n micropackets at q:
 * TYPE first_type then DATA, TAIL on the last, ECRC running from 0xFFFF, LCRC set, link
 * fields zero.  One CRC pass per 32-byte block: ENC_CHUNK blocks are copied, their block
 * CRCs taken together (block_crcs), then both CRCs of each derived. */
static void encode_mps(const uint8_t *hp, Py_ssize_t hl, const uint8_t *pp, Py_ssize_t pln, uint8_t *q,
                       Py_ssize_t n, int vc, int first_type)
{
    uint16_t ecrc = CRC_INIT, bs[ENC_CHUNK], es[ENC_CHUNK];
    const uint64_t base = ((uint64_t)vc << 62) | (1ull << 58); /* DATA */
    const uint16_t base_cc = ctrl6_crc0(base);
    for (Py_ssize_t c0 = 0; c0 < n; c0 += ENC_CHUNK) {
        const Py_ssize_t cn = n - c0 < ENC_CHUNK ? n - c0 : ENC_CHUNK;
        uint8_t *m = q + c0 * MP_BYTES;
        for (Py_ssize_t i = c0; i < c0 + cn; i++, m += MP_BYTES) {
            Py_ssize_t off = i * MP_DATA;
            if (off + MP_DATA <= hl) {
                memcpy(m, hp + off, MP_DATA);
            } else if (off >= hl && off - hl + MP_DATA <= pln) {
                memcpy(m, pp + (off - hl), MP_DATA);
            } else { /* straddles head/payload, or the zero fill */
                for (int j = 0; j < MP_DATA; j++) {
                    Py_ssize_t s = off + j;
                    m[j] = s < hl ? hp[s] : (s - hl < pln ? pp[s - hl] : 0);
                }
            }
        }
        m = q + c0 * MP_BYTES;
        block_crcs(m, MP_BYTES, cn, bs);
        ecrc_run(ecrc, bs, cn, es);
        for (Py_ssize_t k = 0; k < cn; k++, m += MP_BYTES) {
            const Py_ssize_t i = c0 + k;
            const uint16_t b = bs[k];
            ecrc = es[k];
            uint64_t ctrl = i ? base : (((uint64_t)vc << 62) | ((uint64_t)first_type << 58));
            if (i == n - 1)
                ctrl |= 1ull << 57;
            /* the control word's CRC is linear in it: the fixed part's, once, plus ECRC's bytes */
            uint16_t cc = ctrl == base ? base_cc : ctrl6_crc0(ctrl);
            ctrl |= (uint64_t)ecrc << 16;
            ctrl |= adv6(K32 ^ b) ^ cc ^ T[1][ecrc >> 8] ^ T[0][ecrc & 0xFF];
            store_be64(m + MP_DATA, ctrl);
        }
    }
}

#endif
