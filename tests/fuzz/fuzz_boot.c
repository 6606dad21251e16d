/*
 * fuzz_boot.c - libFuzzer target: what a stranger can send to a weft port.
 *
 *   make fuzz        (clang -fsanitize=fuzzer,address,undefined; corpus in corpus_boot/)
 *
 * The input is the byte stream a connecting peer sends: the authentication hello and
 * MAC (comm/auth.c), then a bootstrap record header (comm/bootstrap.c). It is written
 * into one end of a socketpair, which is then shut, and the real handshake runs on the
 * other end with the job's secret, as rank 0's rendezvous does. It must fail cleanly
 * (never crash, read out of bounds or wait past its deadline) unless the bytes carry a
 * valid MAC, which random bytes cannot. The same bytes as a packed address record of
 * the init exchange (comm/connect.c: peer_unpack): refused, or taken and packed again
 * to exactly those bytes followed by zeros.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "comm_int.h"
#include "util.h"

/* Runs the handshake against the bytes as the peer's side of the stream. */
static weft_status_t handshake(const uint8_t *data, size_t size, const char *secret)
{
    int sv[2], peer = -1;
    weft_status_t st = WEFT_ERR_SYSTEM;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return st;
    if (write(sv[1], data, size) == (ssize_t)size) {
        shutdown(sv[1], SHUT_WR);
        st = auth_handshake(sv[0], secret, AUTH_BOOTSTRAP, 0, 0, time_ns() + 200000000ull,
                            &peer);
    }
    close(sv[0]);
    close(sv[1]);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384)                   /* more than a socketpair buffers unread */
        return 0;
    if (handshake(data, size, "fuzz-secret") == WEFT_OK)
        abort();                        /* bytes without the secret authenticated */
    (void)handshake(data, size, NULL);  /* no secret: the hello parser alone */
    if (size >= 16)                     /* a record header from rank 0 */
        (void)bootstrap_check_msg(data, 4, 184);
    peer_info_t p;
    if (peer_unpack(data, size, &p) == 0) {
        uint8_t again[PEER_PACK_MAX];
        size_t n = peer_pack(&p, again);
        if (n > size || memcmp(again, data, n) != 0)
            abort();                    /* a record that parses is its own packing */
        for (size_t i = n; i < size; i++)
            if (data[i] != 0)
                abort();
    }
    return 0;
}
