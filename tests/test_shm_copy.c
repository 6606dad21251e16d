/*
 * test_shm_copy.c - how the shm transport's sender copies large frames into a peer's
 * ring (WEFT_SHM_NT; comm/shm/tp_shm.c): plain or streaming stores, fixed or chosen by
 * the rates it times.
 *
 * The choice is driven here with rates as the sender would time them on this VM (plain
 * 6-19 GB/s and streaming 12-17 while the two cores share a cache; plain 2.4-2.9 and
 * streaming 18-20 while they do not: docs/PERF.md), so each case is exact and quick; the
 * copies themselves are checked by test_coll with WEFT_SHM_NT=0 and 1 (tests/run.sh).
 * Also WEFT_SHM_NT's parsing: auto (the default), 0, 1, and a bad value refused by name
 * with nothing changed. The last line printed is "test_shm_copy: N passed, N failed"; exit
 * status is nonzero on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "shm/shm_int.h"

#define FRAME (128u << 10)

static int n_pass, n_fail;

#define CHECK(cond, ...) do {                                                 \
        if (cond) {                                                           \
            n_pass++;                                                         \
        } else {                                                              \
            n_fail++;                                                         \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
        }                                                                     \
    } while (0)

/* Sends n frames whose copies run at `plain` or `nt` bytes/ns; counts the streamed ones
 * and the changes of choice (and where the first change came). */
typedef struct run { int streamed, changes, first_change; } run_t;

static run_t send_frames(shm_copy_t *c, int n, double plain, double nt)
{
    run_t r = { 0, 0, -1 };
    for (int i = 0; i < n; i++) {
        int s = shm_copy_next(c, FRAME);
        r.streamed += s;
        if (shm_copy_timed(c, FRAME) && shm_copy_note(c, s, s ? nt : plain)) {
            if (r.changes++ == 0)
                r.first_change = i;
        }
    }
    return r;
}

static shm_copy_t mode(long m)
{
    shm_copy_t c;
    memset(&c, 0, sizeof(c));
    c.mode = m;
    return c;
}

/* WEFT_SHM_NT as cfg_load reads it */
static void test_config(void)
{
    static const struct { const char *v; long want; } good[] = {
        { NULL, -1 }, { "auto", -1 }, { "0", 0 }, { "1", 1 },
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        if (good[i].v)
            setenv("WEFT_SHM_NT", good[i].v, 1);
        else
            unsetenv("WEFT_SHM_NT");
        weft_config_t cfg;
        CHECK(cfg_load(&cfg) == WEFT_OK && cfg.shm_nt == good[i].want,
              "WEFT_SHM_NT=%s: got %ld, want %ld", good[i].v ? good[i].v : "(unset)",
              cfg.shm_nt, good[i].want);
    }
    static const char *const bad[] = { "2", "-1", "yes", "1x" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("WEFT_SHM_NT", bad[i], 1);
        weft_config_t cfg;
        memset(&cfg, 0x5a, sizeof(cfg));
        weft_config_t keep = cfg;
        CHECK(cfg_load(&cfg) == WEFT_ERR_INVALID_ARG, "WEFT_SHM_NT=%s accepted", bad[i]);
        CHECK(!memcmp(&cfg, &keep, sizeof(cfg)), "WEFT_SHM_NT=%s: config written", bad[i]);
        CHECK(strstr(weft_last_error(), "WEFT_SHM_NT=") &&
              strstr(weft_last_error(), "is not valid"), "WEFT_SHM_NT=%s: message '%s'",
              bad[i], weft_last_error());
    }
    unsetenv("WEFT_SHM_NT");
}

int main(void)
{
    setenv("WEFT_DEBUG", "NONE", 0);    /* the refusals are checked, not read from the log */
    test_config();

    /* fixed modes: nothing timed, the same way every frame */
    shm_copy_t c = mode(0);
    run_t r = send_frames(&c, 100, 2.5, 19);
    CHECK(r.streamed == 0 && r.changes == 0, "WEFT_SHM_NT=0 streamed %d frames", r.streamed);
    CHECK(!shm_copy_timed(&c, FRAME), "WEFT_SHM_NT=0 times its frames");
    c = mode(1);
    r = send_frames(&c, 100, 16, 12);
    CHECK(r.streamed == 100 && r.changes == 0, "WEFT_SHM_NT=1 streamed %d of 100", r.streamed);
    CHECK(!shm_copy_timed(&c, FRAME), "WEFT_SHM_NT=1 times its frames");
    CHECK(shm_copy_next(&c, 4096) == 0, "WEFT_SHM_NT=1 streams a 4K frame");

    /* auto: small frames are neither timed nor streamed, nor counted */
    c = mode(-1);
    for (int i = 0; i < 100; i++)
        CHECK(shm_copy_next(&c, (64u << 10) - 64) == 0, "auto streams a small frame");
    CHECK(!shm_copy_timed(&c, (64u << 10) - 64) && c.frames == 0,
          "auto times small frames (%u counted)", c.frames);

    /* auto, cores sharing a cache: plain stays; one frame in 128 is streamed to keep its
     * rate known */
    c = mode(-1);
    r = send_frames(&c, 3200, 16, 12);
    CHECK(r.changes == 0 && c.nt == 0, "auto near: %d changes, streaming %d", r.changes, c.nt);
    CHECK(r.streamed == 25, "auto near: %d of 3200 frames streamed, want 25", r.streamed);

    /* the cores move apart: plain drops to 2.5 GB/s, streaming runs at 19. The switch
     * comes within 64 frames (the streaming rate is known), once; then one frame in 64 is
     * plain */
    r = send_frames(&c, 64, 2.5, 19);
    CHECK(r.changes == 1 && c.nt == 1, "auto far: %d changes, streaming %d", r.changes, c.nt);
    r = send_frames(&c, 6400, 2.5, 19);
    CHECK(r.changes == 0 && r.streamed == 6300, "auto far: %d changes, %d of 6400 streamed, "
          "want 0 and 6300", r.changes, r.streamed);

    /* and back together: plain probes at 16 GB/s bring plain back */
    r = send_frames(&c, 640, 16, 12);
    CHECK(r.changes == 1 && c.nt == 0 && r.first_change < 640,
          "auto back near: %d changes, streaming %d", r.changes, c.nt);

    /* the bar is "more than 3.5 times as fast": 2.4x (the most a shared cache showed per
     * frame) and 3.4x stay plain, 3.6x streams */
    c = mode(-1);
    r = send_frames(&c, 3200, 6.5, 15.6);
    CHECK(r.changes == 0 && c.nt == 0, "2.4x: %d changes", r.changes);
    c = mode(-1);
    r = send_frames(&c, 3200, 10, 34);
    CHECK(r.changes == 0 && c.nt == 0, "3.4x: %d changes", r.changes);
    c = mode(-1);
    r = send_frames(&c, 128, 10, 36);
    CHECK(r.changes == 1 && c.nt == 1, "3.6x: %d changes, streaming %d", r.changes, c.nt);

    /* one odd frame does not flip the choice: a single slow plain probe while near */
    c = mode(-1);
    send_frames(&c, 320, 16, 12);   /* (two streamed probes among them) */
    CHECK(shm_copy_note(&c, 0, 5.0) == 0 && c.nt == 0, "one slow plain frame flipped it");

    printf("test_shm_copy: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
