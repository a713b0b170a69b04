/*
 * A world of two ranks inside one process (mw_local), each rank on its own
 * thread, from C; and the argument checks of the C ABI, which must answer
 * MW_INVALID_ARGUMENT with a message and leave the group usable. Prints
 * "RESULT ok" or names the failed check and exits with status 1.
 */
#include "meshwork.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, long line) {
    printf("RESULT err: %s (line %ld); last error: %s\n", what, line, mw_last_error());
    fflush(stdout);
    exit(1);
}

#define OK(call)                                                                     \
    do {                                                                             \
        mw_status s_ = (call);                                                       \
        if (s_ != MW_OK) {                                                           \
            printf("%s returned %s\n", #call, mw_status_string(s_));                 \
            fail(#call, __LINE__);                                                   \
        }                                                                            \
    } while (0)

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) fail("check failed: " #cond, __LINE__);                         \
    } while (0)

/* The call returns `want` and leaves a message naming `needle`. */
#define FAILS_WITH(want, needle, call)                                               \
    do {                                                                             \
        mw_status s_ = (call);                                                       \
        if (s_ != (want)) {                                                          \
            printf("%s returned %s\n", #call, mw_status_string(s_));                 \
            fail("expected " #want, __LINE__);                                       \
        }                                                                            \
        if (strstr(mw_last_error(), (needle)) == NULL) fail("message lacks " needle, __LINE__); \
    } while (0)

#define INVALID(needle, call) FAILS_WITH(MW_INVALID_ARGUMENT, needle, call)

static mw_group *world[2];

/* One rank's part: collectives and messages with its peer, bad input in
 * between. */
static void *rank_main(void *arg) {
    mw_group *g = (mw_group *)arg;
    uint32_t r = mw_rank(g), peer = 1 - r;
    CHECK(mw_world_size(g) == 2);
    /* A fresh thread has no last error. */
    CHECK(strcmp(mw_last_error(), "") == 0);

    int32_t x[5] = {1, 2, 3, 4, 5};
    for (int i = 0; i < 5; i++) x[i] *= (int32_t)(r + 1);
    OK(mw_all_reduce(g, x, 5, MW_I32, MW_SUM));
    for (int i = 0; i < 5; i++) CHECK(x[i] == 3 * (i + 1));

    /* Bad input on both ranks, then the group is still usable. */
    double d[4] = {0};
    INVALID("NULL", mw_all_reduce(g, NULL, 3, MW_F64, MW_SUM));
    INVALID("mw_dtype 99", mw_all_reduce(g, d, 4, 99, MW_SUM));
    INVALID("mw_op 5", mw_scan(g, d, 4, MW_F64, 5));
    INVALID("root 2", mw_reduce(g, d, 4, MW_F64, MW_SUM, 2));
    INVALID("root 7", mw_gather(g, d, d, 1, MW_F64, 7));
    INVALID("overflow", mw_all_reduce(g, d, SIZE_MAX / 4, MW_F64, MW_SUM));
    INVALID("overflow", mw_all_gather(g, d, d, SIZE_MAX / 2 + 1, MW_U8));
    INVALID("overlap", mw_all_to_all(g, d, d + 1, 1, MW_F64));
    INVALID("aligned", mw_all_reduce(g, (char *)d + 1, 2, MW_F64, MW_SUM));
    INVALID("float", mw_all_reduce(g, x, 5, MW_I32, MW_AVG));
    INVALID("out of range", mw_send(g, x, 4, 2, 0));
    OK(mw_barrier(g));

    /* A NULL buffer with a count of 0 is an empty call, not an error. */
    OK(mw_all_reduce(g, NULL, 0, MW_F32, MW_SUM));

    /* Point-to-point: a wrong-length receive is refused and the message
     * stays queued for the right one. */
    uint64_t out[2] = {r * 10 + 1, r * 10 + 2}, in[2] = {0, 0};
    OK(mw_send(g, out, sizeof out, peer, 3));
    INVALID("bytes", mw_recv(g, in, sizeof in[0], peer, 3));
    OK(mw_recv(g, in, sizeof in, peer, 3));
    CHECK(in[0] == peer * 10 + 1 && in[1] == peer * 10 + 2);

    /* f16 and bf16 travel as 16-bit patterns: 1.0 + 1.0 = 2.0. */
    uint16_t h[2] = {0x3C00, 0x3F80}; /* f16 1.0, bf16 1.0 */
    OK(mw_all_reduce(g, &h[0], 1, MW_F16, MW_SUM));
    OK(mw_all_reduce(g, &h[1], 1, MW_BF16, MW_SUM));
    CHECK(h[0] == 0x4000 && h[1] == 0x4000);

    OK(mw_shutdown(g));
    OK(mw_shutdown(g)); /* idempotent */
    FAILS_WITH(MW_SHUT_DOWN, "shut down", mw_barrier(g));
    return NULL;
}

int main(void) {
    /* Arguments checked before any group exists. */
    INVALID("NULL", mw_local(2, NULL));
    INVALID("at least one rank", mw_local(0, world));
    INVALID("NULL", mw_connect_from_env(NULL));
    INVALID("NULL", mw_barrier(NULL));
    CHECK(mw_rank(NULL) == UINT32_MAX && mw_world_size(NULL) == 0);
    mw_free(NULL);
    CHECK(strcmp(mw_status_string(MW_OK), "MW_OK") == 0);
    CHECK(strcmp(mw_status_string(MW_TIMEOUT), "MW_TIMEOUT") == 0);
    CHECK(strcmp(mw_status_string(MW_INTERNAL), "MW_INTERNAL") == 0);
    CHECK(strcmp(mw_status_string(-1), "MW_UNKNOWN_STATUS") == 0);

    OK(mw_local(2, world));
    CHECK(mw_rank(world[0]) == 0 && mw_rank(world[1]) == 1);
    pthread_t t[2];
    for (int r = 0; r < 2; r++) CHECK(pthread_create(&t[r], NULL, rank_main, world[r]) == 0);
    for (int r = 0; r < 2; r++) CHECK(pthread_join(t[r], NULL) == 0);
    for (int r = 0; r < 2; r++) mw_free(world[r]);
    printf("RESULT ok\n");
    return 0;
}
