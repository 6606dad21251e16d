/*
 * fuzz_frame.c - libFuzzer target: the frame header check and peer-state descriptions.
 *
 *   make fuzz        (clang -fsanitize=fuzzer,address,undefined; corpus in corpus_frame/)
 *
 * Input: a 40-byte frame header as it would arrive from any peer, then what the
 * receiving step expects (comm id, peer, call, p2p, frame number, room, element size),
 * then a 64-byte peer state. Everything must be accepted without a crash, an
 * out-of-bounds read or write, or an unterminated message; a header that passes must
 * really satisfy every bound the engine relies on before its memcpy.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

static void take(void *dst, size_t n, const uint8_t **p, size_t *left)
{
    size_t k = *left < n ? *left : n;
    memset(dst, 0, n);
    memcpy(dst, *p, k);
    *p += k;
    *left -= k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    frame_hdr_t h;
    frame_expect_t e;
    tp_state_t s;
    char why[400], d1[128];
    take(&h, sizeof(h), &data, &size);
    take(&e, sizeof(e), &data, &size);
    take(&s, sizeof(s), &data, &size);
    e.room %= 1u << 26;                 /* a step never expects more than its buffer */
    frame_verdict_t v = frame_check(&h, &e, why, sizeof(why));
    if (v != FRAME_OK && strnlen(why, sizeof(why)) == sizeof(why))
        abort();                        /* unterminated message */
    if (v == FRAME_OK && (h.len > e.room || e.esz == 0 || h.len % e.esz != 0 ||
                          h.magic != FRAME_MAGIC || h.src_rank != e.peer))
        abort();                        /* a header that would overrun the step */
    call_desc_t d;
    call_desc_of_hdr(&h, &d);
    call_desc_str(&d, d1, sizeof(d1));
    call_desc_str(&s.call, d1, sizeof(d1));
    call_desc_str(&s.other_call, d1, sizeof(d1));
    (void)coll_name(s.call.coll);
    return 0;
}
