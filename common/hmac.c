/*
 * hmac.c - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104).
 *
 * Used to authenticate connections with WEFT_SECRET; not a general crypto library.
 *
 * Invariants: a sha256_ctx_t holds buflen < 64 pending bytes between calls, and
 * `bytes` counts every byte fed so far (the message length for the final padding).
 * Words are read and written big-endian byte by byte, so the code is independent of
 * host endianness and alignment. Key material on the stack is wiped before return.
 */
#include <string.h>

#include "hmac.h"

static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static inline uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The message schedule W[0..63] of one 64-byte block (FIPS 180-4 6.2.2 step 1). */
static void sha256_schedule(const uint8_t block[64], uint32_t w[64])
{
    for (int t = 0; t < 16; t++)
        w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
}

/* Folds one 64-byte block into the state (steps 2-4). */
static void sha256_block(uint32_t state[8], const uint8_t block[64])
{
    uint32_t w[64];
    sha256_schedule(block, w);

    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; t++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = h + S1 + ch + sha256_k[t] + w[t];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        h = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    state[0] += a; state[1] += b; state[2] += c; state[3] += d;
    state[4] += e; state[5] += f; state[6] += g; state[7] += h;
}

void sha256_init(sha256_ctx_t *c)
{
    static const uint32_t h0[8] = {
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    };
    memcpy(c->state, h0, sizeof(h0));
    c->bytes = 0;
    c->buflen = 0;
}

void sha256_update(sha256_ctx_t *c, const void *data, size_t n)
{
    const uint8_t *p = (const uint8_t *)data;
    c->bytes += n;
    if (n == 0)
        return;
    if (c->buflen > 0) {
        size_t take = 64 - c->buflen < n ? 64 - c->buflen : n;
        memcpy(c->buf + c->buflen, p, take);
        c->buflen += take;
        p += take;
        n -= take;
        if (c->buflen < 64)
            return;
        sha256_block(c->state, c->buf);
        c->buflen = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        sha256_block(c->state, p);
    if (n > 0)
        memcpy(c->buf, p, n);
    c->buflen = n;
}

/* Pads with 0x80, zeros and the 64-bit big-endian bit length (FIPS 180-4 5.1.1). */
void sha256_final(sha256_ctx_t *c, uint8_t out[SHA256_LEN])
{
    uint64_t bits = c->bytes * 8;
    c->buf[c->buflen++] = 0x80;
    if (c->buflen > 56) {
        memset(c->buf + c->buflen, 0, 64 - c->buflen);
        sha256_block(c->state, c->buf);
        c->buflen = 0;
    }
    memset(c->buf + c->buflen, 0, 56 - c->buflen);
    for (int i = 0; i < 8; i++)
        c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_block(c->state, c->buf);
    for (int i = 0; i < 8; i++)
        store_be32(out + 4 * i, c->state[i]);
    memset(c, 0, sizeof(*c));
}

void sha256(const void *data, size_t n, uint8_t out[SHA256_LEN])
{
    sha256_ctx_t c;
    sha256_init(&c);
    sha256_update(&c, data, n);
    sha256_final(&c, out);
}

/* HMAC(K, m) = H((K0 ^ opad) || H((K0 ^ ipad) || m)), K0 = K padded (or hashed) to 64. */
void hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen,
                 uint8_t out[SHA256_LEN])
{
    uint8_t k0[64] = {0}, pad[64], inner[SHA256_LEN];
    sha256_ctx_t c;

    if (keylen > sizeof(k0))
        sha256(key, keylen, k0);
    else if (keylen > 0)
        memcpy(k0, key, keylen);

    for (int i = 0; i < 64; i++)
        pad[i] = k0[i] ^ 0x36;
    sha256_init(&c);
    sha256_update(&c, pad, sizeof(pad));
    sha256_update(&c, msg, msglen);
    sha256_final(&c, inner);

    for (int i = 0; i < 64; i++)
        pad[i] = k0[i] ^ 0x5c;
    sha256_init(&c);
    sha256_update(&c, pad, sizeof(pad));
    sha256_update(&c, inner, sizeof(inner));
    sha256_final(&c, out);

    /* volatile stores so the wipe of key material is not optimised away */
    volatile uint8_t *vk = k0, *vp = pad, *vi = inner;
    for (size_t i = 0; i < sizeof(k0); i++) {
        vk[i] = 0;
        vp[i] = 0;
    }
    for (size_t i = 0; i < sizeof(inner); i++)
        vi[i] = 0;
}

int digest_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}
