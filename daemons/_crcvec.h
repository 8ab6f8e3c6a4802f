/* Block CRCs of many micropackets at once (README "Data plane"): the zero-init CRC of
 * each 32-byte data block, out[i] = block_crc0(p + i * stride), for n blocks.  Included
 * by _gsncrc.h before encode_mps.
 *
 * By AVX-512 VPCLMULQDQ where the CPU has it (crc_use("vpclmul"), the default there):
 * four blocks per 512-bit register, one block per 128-bit lane, the same maths as
 * block_crc0_clmul (S = A x^208 + B x^144 + C x^80 + D x^16 mod P, reduced by Barrett)
 * done for four blocks by each instruction, and with no dependency from one block to
 * the next.  A single call of block_crc0_clmul waits on its own chain of five
 * multiplies; here the chains of consecutive blocks overlap.  Otherwise the scalar
 * kernel of crc_use() in a loop.
 */
#ifndef GSN_CRCVEC_H
#define GSN_CRCVEC_H

#ifdef GSN_CLMUL
/* The block CRCs of four blocks, lane k of ab holding block k's first 16 bytes and lane k
 * of cd its last 16 (as loaded), stored at out[0..3]. */
__attribute__((target("avx512f,avx512bw,vpclmulqdq"))) static inline void crc4_vpclmul(__m512i ab, __m512i cd,
                                                                                        uint16_t *out)
{
    /* per 128-bit lane: both 64-bit words byte-reversed (the words are big-endian) */
    const __m512i bswap = _mm512_broadcast_i32x4(_mm_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i kab = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)KX144, (long long)KX208));
    const __m512i kcd = _mm512_broadcast_i32x4(_mm_set_epi64x(1ll << 16, (long long)KX80));
    const __m512i mu = _mm512_broadcast_i32x4(_mm_set_epi64x(0, (long long)MU80));
    const __m512i poly = _mm512_broadcast_i32x4(_mm_set_epi64x(0, CRC_POLY));
    const __m128i pick = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    ab = _mm512_shuffle_epi8(ab, bswap); /* lane k: A (low word), B of block k */
    cd = _mm512_shuffle_epi8(cd, bswap); /* C, D */
    __m512i s = _mm512_xor_si512(_mm512_clmulepi64_epi128(ab, kab, 0x00), _mm512_clmulepi64_epi128(ab, kab, 0x11));
    s = _mm512_ternarylogic_epi64(s, _mm512_clmulepi64_epi128(cd, kcd, 0x00),
                                  _mm512_clmulepi64_epi128(cd, kcd, 0x11), 0x96); /* three-way XOR */
    const __m512i top = _mm512_bsrli_epi128(s, 2);                              /* floor(S / x^16) */
    const __m512i q = _mm512_xor_si512(top, _mm512_bsrli_epi128(_mm512_clmulepi64_epi128(top, mu, 0x00), 8));
    const __m512i r = _mm512_xor_si512(s, _mm512_clmulepi64_epi128(q, poly, 0x00));
    /* the low 16 bits of each lane's low word: words 0, 2, 4, 6 of the narrowed vector */
    _mm_storel_epi64((__m128i *)out, _mm_shuffle_epi8(_mm512_cvtepi64_epi16(r), pick));
}

/* n a multiple of 4 */
__attribute__((target("avx512f,avx512bw,vpclmulqdq"))) static void block_crcs_vpclmul(const uint8_t *p,
                                                                                       Py_ssize_t stride,
                                                                                       Py_ssize_t n, uint16_t *out)
{
    for (Py_ssize_t i = 0; i < n; i += 4, p += 4 * stride) {
        __m512i ab = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
        __m512i cd = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + 16)));
        ab = _mm512_inserti32x4(ab, _mm_loadu_si128((const __m128i *)(p + stride)), 1);
        cd = _mm512_inserti32x4(cd, _mm_loadu_si128((const __m128i *)(p + stride + 16)), 1);
        ab = _mm512_inserti32x4(ab, _mm_loadu_si128((const __m128i *)(p + 2 * stride)), 2);
        cd = _mm512_inserti32x4(cd, _mm_loadu_si128((const __m128i *)(p + 2 * stride + 16)), 2);
        ab = _mm512_inserti32x4(ab, _mm_loadu_si128((const __m128i *)(p + 3 * stride)), 3);
        cd = _mm512_inserti32x4(cd, _mm_loadu_si128((const __m128i *)(p + 3 * stride + 16)), 3);
        crc4_vpclmul(ab, cd, out + i);
    }
}

/* n a multiple of 4: the n 32-byte blocks at src (contiguous) copied to dst, one every
 * `stride` bytes, and their block CRCs in out: the copy rides on the loads the CRCs need. */
__attribute__((target("avx512f,avx512bw,vpclmulqdq"))) static inline void block_crcs_copy_vpclmul(const uint8_t *src,
                                                                                            uint8_t *dst,
                                                                                            Py_ssize_t stride,
                                                                                            Py_ssize_t n,
                                                                                            uint16_t *out)
{
    for (Py_ssize_t i = 0; i < n; i += 4, src += 128, dst += 4 * stride) {
        const __m512i v0 = _mm512_loadu_si512(src), v1 = _mm512_loadu_si512(src + 64); /* blocks 0, 1 and 2, 3 */
        _mm256_storeu_si256((__m256i *)dst, _mm512_castsi512_si256(v0));
        _mm256_storeu_si256((__m256i *)(dst + stride), _mm512_extracti64x4_epi64(v0, 1));
        _mm256_storeu_si256((__m256i *)(dst + 2 * stride), _mm512_castsi512_si256(v1));
        _mm256_storeu_si256((__m256i *)(dst + 3 * stride), _mm512_extracti64x4_epi64(v1, 1));
        /* lane k: block k's first 16 bytes (ab), its last 16 (cd) */
        crc4_vpclmul(_mm512_shuffle_i64x2(v0, v1, 0x88), _mm512_shuffle_i64x2(v0, v1, 0xDD), out + i);
    }
}

/* n a multiple of 4: b[i] as block_crcs, and ok[i] = 1 when micropacket i's LCRC is right.
 * The LCRC (from 0xFFFF over the data and the control word's first six bytes) is
 * 0xFFFF x^304 + (A x^256 + B x^192 + C x^128 + D x^64 + (ctrl with the LCRC cleared)) mod P,
 * and A x^256 + .. + D x^64 is the block CRC's S times x^48: one shift and a second
 * reduction on the block CRC and the control word already loaded, no table. */
__attribute__((target("avx512f,avx512bw,vpclmulqdq"))) static void lcrc_scan_vpclmul(const uint8_t *p,
                                                                                      Py_ssize_t n, uint16_t *b,
                                                                                      uint8_t *ok)
{
    const __m512i bswap = _mm512_broadcast_i32x4(_mm_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i kab = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)KX144, (long long)KX208));
    const __m512i kcd = _mm512_broadcast_i32x4(_mm_set_epi64x(1ll << 16, (long long)KX80));
    const __m512i mu = _mm512_broadcast_i32x4(_mm_set_epi64x(0, (long long)MU80));
    const __m512i poly = _mm512_broadcast_i32x4(_mm_set_epi64x(0, CRC_POLY));
    const __m512i clear = _mm512_broadcast_i32x4(_mm_set_epi64x(0, ~0xFFFFll)); /* the control word less LCRC */
    const __m512i low16 = _mm512_broadcast_i32x4(_mm_set_epi64x(0, 0xFFFF));
    const __m512i l38 = _mm512_broadcast_i32x4(_mm_set_epi64x(0, (long long)KL38));
    const __m128i pick = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    for (Py_ssize_t i = 0; i < n; i += 4, p += 4 * MP_BYTES) {
        __m512i ab = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
        __m512i cd = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + 16)));
        __m512i cw = _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(p + 32)));
        for (int k = 1; k < 4; k++) {
            const uint8_t *m = p + k * MP_BYTES;
            ab = _mm512_mask_broadcast_i32x4(ab, (__mmask16)(0xF << (4 * k)), _mm_loadu_si128((const __m128i *)m));
            cd = _mm512_mask_broadcast_i32x4(cd, (__mmask16)(0xF << (4 * k)), _mm_loadu_si128((const __m128i *)(m + 16)));
            cw = _mm512_mask_broadcast_i32x4(cw, (__mmask16)(0xF << (4 * k)), _mm_loadl_epi64((const __m128i *)(m + 32)));
        }
        ab = _mm512_shuffle_epi8(ab, bswap);
        cd = _mm512_shuffle_epi8(cd, bswap);
        cw = _mm512_shuffle_epi8(cw, bswap); /* low word: the control word */
        __m512i s = _mm512_xor_si512(_mm512_clmulepi64_epi128(ab, kab, 0x00), _mm512_clmulepi64_epi128(ab, kab, 0x11));
        s = _mm512_ternarylogic_epi64(s, _mm512_clmulepi64_epi128(cd, kcd, 0x00),
                                      _mm512_clmulepi64_epi128(cd, kcd, 0x11), 0x96);
        const __m512i ts = _mm512_bsrli_epi128(s, 2);
        const __m512i qs = _mm512_xor_si512(ts, _mm512_bsrli_epi128(_mm512_clmulepi64_epi128(ts, mu, 0x00), 8));
        const __m512i rs = _mm512_xor_si512(s, _mm512_clmulepi64_epi128(qs, poly, 0x00));
        /* the data's part of the LCRC sum is S x^48 (each of A..D 48 places higher), so
           mod P it is b x^48: (b << 48) ^ (cw & clear), one 64-bit word to reduce instead
           of four more multiplies on the data */
        __m512i l = _mm512_slli_epi64(_mm512_and_si512(rs, low16), 48);
        l = _mm512_ternarylogic_epi64(l, cw, clear, 0x78); /* l ^ (cw & clear) */
        const __m512i tl = _mm512_bsrli_epi128(l, 2);
        const __m512i ql = _mm512_xor_si512(tl, _mm512_bsrli_epi128(_mm512_clmulepi64_epi128(tl, mu, 0x00), 8));
        const __m512i rl = _mm512_xor_si512(l, _mm512_clmulepi64_epi128(ql, poly, 0x00));
        _mm_storel_epi64((__m128i *)(b + i), _mm_shuffle_epi8(_mm512_cvtepi64_epi16(rs), pick));
        /* a lane is bad when its computed LCRC ^ 0xFFFF x^304 differs from the stored one */
        const __mmask8 bad = _mm512_test_epi64_mask(_mm512_ternarylogic_epi64(rl, cw, l38, 0x96), low16);
        ok[i] = !(bad & 1), ok[i + 1] = !(bad & 4), ok[i + 2] = !(bad & 16), ok[i + 3] = !(bad & 64);
    }
}

/* n a multiple of 4: the control words of n DATA micropackets without grants at m (one
 * every MP_BYTES, their data already there): ctrl | TSEQ (tseq0 + j) | ECRC es[j] | the
 * LCRC from the data's block CRC b[j], four per iteration.  The LCRC is the one
 * lcrc_scan_vpclmul checks: 0xFFFF x^304 + (b x^48 + the control word less its LCRC) mod P,
 * one Barrett reduction per micropacket instead of five table lookups (tx_encode). */
__attribute__((target("avx512f,avx512bw,vpclmulqdq"))) static void tx_ctrl_vpclmul(uint8_t *m, Py_ssize_t n,
                                                                                    const uint16_t *b,
                                                                                    const uint16_t *es,
                                                                                    uint64_t ctrl, uint64_t tseq0)
{
    const __m512i bswap = _mm512_broadcast_i32x4(_mm_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i mu = _mm512_broadcast_i32x4(_mm_set_epi64x(0, (long long)MU80));
    const __m512i poly = _mm512_broadcast_i32x4(_mm_set_epi64x(0, CRC_POLY));
    const __m512i low16 = _mm512_broadcast_i32x4(_mm_set_epi64x(0, 0xFFFF));
    const __m512i l38 = _mm512_broadcast_i32x4(_mm_set_epi64x(0, (long long)KL38));
    const __m512i spread = _mm512_set_epi64(0, 3, 0, 2, 0, 1, 0, 0); /* value k to lane k's low word */
    const __m512i lane = _mm512_set_epi64(0, 3, 0, 2, 0, 1, 0, 0);
    const __m512i tseq_mask = _mm512_set1_epi64(0xFF);
    const __m512i base = _mm512_maskz_set1_epi64(0x55, (long long)ctrl);
    for (Py_ssize_t i = 0; i < n; i += 4, m += 4 * MP_BYTES) {
        const __m512i bv = _mm512_maskz_permutexvar_epi64(
            0x55, spread, _mm512_castsi256_si512(_mm256_cvtepu16_epi64(_mm_loadl_epi64((const __m128i *)(b + i)))));
        const __m512i ev = _mm512_maskz_permutexvar_epi64(
            0x55, spread, _mm512_castsi256_si512(_mm256_cvtepu16_epi64(_mm_loadl_epi64((const __m128i *)(es + i)))));
        const __m512i tv = _mm512_maskz_and_epi64(
            0x55, _mm512_add_epi64(lane, _mm512_set1_epi64((long long)(tseq0 + (uint64_t)i))), tseq_mask);
        /* the control word less its LCRC */
        const __m512i cw = _mm512_ternarylogic_epi64(base, _mm512_slli_epi64(tv, 32), _mm512_slli_epi64(ev, 16), 0xFE);
        const __m512i l = _mm512_xor_si512(_mm512_slli_epi64(bv, 48), cw);
        const __m512i tl = _mm512_bsrli_epi128(l, 2);
        const __m512i ql = _mm512_xor_si512(tl, _mm512_bsrli_epi128(_mm512_clmulepi64_epi128(tl, mu, 0x00), 8));
        const __m512i rl = _mm512_xor_si512(l, _mm512_clmulepi64_epi128(ql, poly, 0x00));
        /* cw | ((rl ^ l38) & low16) */
        const __m512i w = _mm512_shuffle_epi8(
            _mm512_or_si512(cw, _mm512_and_si512(_mm512_xor_si512(rl, l38), low16)), bswap);
        _mm_storel_epi64((__m128i *)(m + MP_DATA), _mm512_castsi512_si128(w));
        _mm_storel_epi64((__m128i *)(m + MP_BYTES + MP_DATA), _mm512_extracti32x4_epi32(w, 1));
        _mm_storel_epi64((__m128i *)(m + 2 * MP_BYTES + MP_DATA), _mm512_extracti32x4_epi32(w, 2));
        _mm_storel_epi64((__m128i *)(m + 3 * MP_BYTES + MP_DATA), _mm512_extracti32x4_epi32(w, 3));
    }
}

__attribute__((target("pclmul,sse4.1"))) static void block_crcs_clmul(const uint8_t *p, Py_ssize_t stride,
                                                                      Py_ssize_t n, uint16_t *out)
{
    for (Py_ssize_t i = 0; i < n; i++, p += stride)
        out[i] = block_crc0_clmul(p);
}
#endif

static void block_crcs(const uint8_t *p, Py_ssize_t stride, Py_ssize_t n, uint16_t *out)
{
#ifdef GSN_CLMUL
    if (crc_vec && n >= 4) {
        Py_ssize_t k = n & ~(Py_ssize_t)3;
        block_crcs_vpclmul(p, stride, k, out);
        p += k * stride, out += k, n -= k;
    }
    if (crc_clmul) {
        block_crcs_clmul(p, stride, n, out);
        return;
    }
#endif
    for (Py_ssize_t i = 0; i < n; i++, p += stride)
        out[i] = block_crc0_tables(p);
}

/* block_crcs of n 32-byte blocks copied from src (contiguous) to dst, one every stride bytes. */
static inline void block_crcs_copy(const uint8_t *src, uint8_t *dst, Py_ssize_t stride, Py_ssize_t n, uint16_t *out)
{
#ifdef GSN_CLMUL
    if (crc_vec && n >= 4) {
        Py_ssize_t k = n & ~(Py_ssize_t)3;
        block_crcs_copy_vpclmul(src, dst, stride, k, out);
        src += k * MP_DATA, dst += k * stride, out += k, n -= k;
    }
#endif
    for (Py_ssize_t i = 0; i < n; i++)
        memcpy(dst + i * stride, src + i * MP_DATA, MP_DATA);
    block_crcs(dst, stride, n, out);
}

/* n micropackets at p: b[i] their data's block CRC, ok[i] 1 when the LCRC is right; how
 * many are bad. */
static Py_ssize_t lcrc_scan(const uint8_t *p, Py_ssize_t n, uint16_t *b, uint8_t *ok)
{
    Py_ssize_t i = 0, bad = 0;
#ifdef GSN_CLMUL
    if (crc_vec) {
        i = n & ~(Py_ssize_t)3;
        lcrc_scan_vpclmul(p, i, b, ok);
        for (Py_ssize_t k = 0; k < i; k++)
            bad += !ok[k];
    }
#endif
    for (; i < n; i++) {
        const uint8_t *m = p + i * MP_BYTES;
        const uint64_t ctrl = load_be64(m + MP_DATA);
        b[i] = block_crc0(m);
        ok[i] = (uint16_t)(adv6(K32 ^ b[i]) ^ ctrl6_crc0(ctrl)) == (uint16_t)ctrl;
        bad += !ok[i];
    }
    return bad;
}

/* The running ECRC over n blocks with block CRCs b: out[i] = M32(out[i-1]) ^ b[i] from
 * e (0xFFFF at a Message's start); returns out[n-1] (e when n is 0).  Four at a time:
 * out[i+k] = M32^(k+1)(out[i-1]) ^ (the chain of b[i..i+k] alone), so the dependency
 * from one group to the next is one table step instead of four. */
static uint16_t ecrc_run(uint16_t e, const uint16_t *b, Py_ssize_t n, uint16_t *out)
{
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint16_t p0 = b[i], p1 = adv32(p0) ^ b[i + 1], p2 = adv32(p1) ^ b[i + 2], p3 = adv32(p2) ^ b[i + 3];
        const uint8_t hi = e >> 8, lo = e & 0xFF;
        out[i] = (M32[0][hi] ^ M32[1][lo]) ^ p0;
        out[i + 1] = (M32K[0][0][hi] ^ M32K[0][1][lo]) ^ p1;
        out[i + 2] = (M32K[1][0][hi] ^ M32K[1][1][lo]) ^ p2;
        e = out[i + 3] = (M32K[2][0][hi] ^ M32K[2][1][lo]) ^ p3;
    }
    for (; i < n; i++)
        e = out[i] = adv32(e) ^ b[i];
    return e;
}


#endif
