/*
 * rng.h - the trainer's random numbers: xoshiro256** seeded through splitmix64.
 *
 * One train_rng_t per purpose (init, shuffle, sampling), each seeded from --seed and a
 * purpose constant, so changing one use never shifts another's stream. Deterministic and
 * identical on every platform (integer arithmetic; normals via Box-Muller in double).
 */
#ifndef WEFT_TRAIN_RNG_H
#define WEFT_TRAIN_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct { uint64_t s[4]; } train_rng_t;

static inline uint64_t train_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void train_rng_seed(train_rng_t *r, uint64_t seed, uint64_t purpose)
{
    uint64_t x = seed ^ (purpose * 0xd1342543de82ef95ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = train_splitmix64(&x);
}

static inline uint64_t train_rng_u64(train_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* uniform in [0, 1) with 53 random bits */
static inline double train_rng_uniform(train_rng_t *r)
{
    return (double)(train_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* uniform integer in [0, n), n > 0 (the modulo bias is below 2^-40 for n < 2^24) */
static inline uint64_t train_rng_below(train_rng_t *r, uint64_t n)
{
    return train_rng_u64(r) % n;
}

/* standard normal (Box-Muller, one value per call) */
static inline double train_rng_normal(train_rng_t *r)
{
    double u1 = 1.0 - train_rng_uniform(r);   // (0, 1]
    double u2 = train_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

enum { TRAIN_RNG_INIT = 1, TRAIN_RNG_SHUFFLE = 2, TRAIN_RNG_SAMPLE = 3 };

#endif
