/*
 * hmac.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for authenticating
 * connections with WEFT_SECRET. weft's own implementation; tested against the
 * FIPS/RFC 4231 vectors.
 */
#ifndef WEFT_HMAC_H
#define WEFT_HMAC_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

typedef struct sha256_ctx {
    uint32_t state[8];
    uint64_t bytes;
    uint8_t buf[64];
    size_t buflen;
} sha256_ctx_t;

void sha256_init(sha256_ctx_t *c);
void sha256_update(sha256_ctx_t *c, const void *data, size_t n);
void sha256_final(sha256_ctx_t *c, uint8_t out[SHA256_LEN]);
void sha256(const void *data, size_t n, uint8_t out[SHA256_LEN]);

void hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen,
                 uint8_t out[SHA256_LEN]);

/* Constant-time comparison: 1 when equal. */
int digest_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif
