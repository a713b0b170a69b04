/*
 * Every collective and point-to-point call of meshwork from C, with exact
 * results, and bad input refused with MW_INVALID_ARGUMENT while the group
 * stays usable. Written against include/meshwork.h alone (and valid C++).
 *
 *   cargo build --release -p meshwork-ffi
 *   cc -std=c11 -O2 -Wall -Wextra -I ffi/include ffi/examples/collectives.c \
 *      target/release/libmeshwork.a -lpthread -ldl -lm -o collectives
 *   meshrun -n 4 -- ./collectives
 *
 * Each rank prints "RESULT ok rank R of W", or names the failed check and
 * exits with status 1.
 */
#include "meshwork.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW 64

static uint32_t rank, world;

static void fail(const char *what, long line) {
    printf("RESULT err rank %u: %s (line %ld); last error: %s\n", (unsigned)rank, what, line,
           mw_last_error());
    fflush(stdout);
    exit(1);
}

/* Exit unless the call returned MW_OK. */
#define OK(call)                                                                     \
    do {                                                                             \
        mw_status s_ = (call);                                                       \
        if (s_ != MW_OK) {                                                           \
            printf("%s returned %s\n", #call, mw_status_string(s_));                 \
            fail(#call, __LINE__);                                                   \
        }                                                                            \
    } while (0)

/* Exit unless `cond` holds. */
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) fail("check failed: " #cond, __LINE__);                         \
    } while (0)

/* Exit unless the call returned MW_INVALID_ARGUMENT with a message. */
#define INVALID(call)                                                                \
    do {                                                                             \
        mw_status s_ = (call);                                                       \
        if (s_ != MW_INVALID_ARGUMENT) {                                             \
            printf("%s returned %s\n", #call, mw_status_string(s_));                 \
            fail("expected MW_INVALID_ARGUMENT", __LINE__);                          \
        }                                                                            \
        if (mw_last_error()[0] == '\0') fail("no message for " #call, __LINE__);     \
    } while (0)

/* The IEEE binary16 bits of the integer v (1 <= v <= 2048, exact). */
static uint16_t f16_of(uint32_t v) {
    uint32_t e = 0;
    while ((v >> (e + 1)) != 0) e++;
    return (uint16_t)(((e + 15) << 10) | (((v - (1u << e)) << (10 - e)) & 0x3ff));
}

/* The bfloat16 bits of the integer v (exact for v < 256). */
static uint16_t bf16_of(uint32_t v) {
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)(bits >> 16);
}

/* all_reduce (sum) of rank + 1 + i on every element type. */
static void all_reduce_every_dtype(mw_group *g) {
    enum { N = 3 };
    uint32_t total = world * (world + 1) / 2; /* sum of rank + 1 */
    float f32[N];
    double f64[N];
    uint16_t f16[N], bf16[N];
    int8_t i8[N];
    int32_t i32[N];
    int64_t i64[N];
    uint8_t u8[N];
    uint32_t u32[N];
    uint64_t u64[N];
    for (uint32_t i = 0; i < N; i++) {
        uint32_t v = rank + 1 + i;
        f32[i] = (float)v;
        f64[i] = (double)v;
        f16[i] = f16_of(v);
        bf16[i] = bf16_of(v);
        i8[i] = (int8_t)v;
        i32[i] = -(int32_t)v;
        i64[i] = (int64_t)v << 33;
        u8[i] = (uint8_t)v;
        u32[i] = v;
        u64[i] = (uint64_t)v << 40;
    }
    OK(mw_all_reduce(g, f32, N, MW_F32, MW_SUM));
    OK(mw_all_reduce(g, f64, N, MW_F64, MW_SUM));
    OK(mw_all_reduce(g, f16, N, MW_F16, MW_SUM));
    OK(mw_all_reduce(g, bf16, N, MW_BF16, MW_SUM));
    OK(mw_all_reduce(g, i8, N, MW_I8, MW_SUM));
    OK(mw_all_reduce(g, i32, N, MW_I32, MW_SUM));
    OK(mw_all_reduce(g, i64, N, MW_I64, MW_SUM));
    OK(mw_all_reduce(g, u8, N, MW_U8, MW_SUM));
    OK(mw_all_reduce(g, u32, N, MW_U32, MW_SUM));
    OK(mw_all_reduce(g, u64, N, MW_U64, MW_SUM));
    for (uint32_t i = 0; i < N; i++) {
        uint32_t want = total + world * i;
        CHECK(f32[i] == (float)want);
        CHECK(f64[i] == (double)want);
        CHECK(f16[i] == f16_of(want));
        CHECK(bf16[i] == bf16_of(want));
        CHECK(i8[i] == (int8_t)want);
        CHECK(i32[i] == -(int32_t)want);
        CHECK(i64[i] == (int64_t)want << 33);
        CHECK(u8[i] == (uint8_t)want);
        CHECK(u32[i] == want);
        CHECK(u64[i] == (uint64_t)want << 40);
    }
}

/* Every operator on double: rank + 1 reduced over the world. */
static void all_reduce_every_op(mw_group *g) {
    double sum = rank + 1, prod = rank + 1, mn = rank + 1, mx = rank + 1, avg = rank + 1;
    OK(mw_all_reduce(g, &sum, 1, MW_F64, MW_SUM));
    OK(mw_all_reduce(g, &prod, 1, MW_F64, MW_PROD));
    OK(mw_all_reduce(g, &mn, 1, MW_F64, MW_MIN));
    OK(mw_all_reduce(g, &mx, 1, MW_F64, MW_MAX));
    OK(mw_all_reduce(g, &avg, 1, MW_F64, MW_AVG));
    double factorial = 1;
    for (uint32_t r = 1; r <= world; r++) factorial *= r;
    CHECK(sum == world * (world + 1) / 2.0);
    CHECK(prod == factorial);
    CHECK(mn == 1.0);
    CHECK(mx == (double)world);
    CHECK(avg == (world + 1) / 2.0);
}

static void rooted_and_personalised(mw_group *g) {
    uint32_t last = world - 1;

    /* broadcast from the last rank */
    int64_t b[4];
    for (int i = 0; i < 4; i++) b[i] = rank == last ? 1000 + i : -1;
    OK(mw_broadcast(g, b, 4, MW_I64, last));
    for (int i = 0; i < 4; i++) CHECK(b[i] == 1000 + i);

    /* all_gather: rank r sends {10r, 10r + 1} */
    uint32_t send2[2] = {rank * 10, rank * 10 + 1}, gathered[2 * MAXW];
    OK(mw_all_gather(g, send2, gathered, 2, MW_U32));
    for (uint32_t j = 0; j < world; j++)
        for (uint32_t k = 0; k < 2; k++) CHECK(gathered[2 * j + k] == j * 10 + k);

    /* reduce_scatter (sum): element i of every rank's send is rank + i */
    int32_t rs_send[2 * MAXW], rs_recv[2];
    for (uint32_t i = 0; i < 2 * world; i++) rs_send[i] = (int32_t)(rank + i);
    OK(mw_reduce_scatter(g, rs_send, rs_recv, 2, MW_I32, MW_SUM));
    for (uint32_t k = 0; k < 2; k++)
        CHECK(rs_recv[k] == (int32_t)(world * (world - 1) / 2 + world * (2 * rank + k)));

    /* reduce (max) to rank 0 */
    float red[2] = {(float)rank, -(float)rank};
    OK(mw_reduce(g, red, 2, MW_F32, MW_MAX, 0));
    if (rank == 0) CHECK(red[0] == (float)last && red[1] == 0.0f);

    /* all_to_all: block j, element k of rank r is 100r + 10j + k */
    uint64_t a_send[2 * MAXW], a_recv[2 * MAXW];
    for (uint32_t j = 0; j < world; j++)
        for (uint32_t k = 0; k < 2; k++) a_send[2 * j + k] = 100 * rank + 10 * j + k;
    OK(mw_all_to_all(g, a_send, a_recv, 2, MW_U64));
    for (uint32_t i = 0; i < world; i++)
        for (uint32_t k = 0; k < 2; k++) CHECK(a_recv[2 * i + k] == 100 * i + 10 * rank + k);

    /* gather to rank 1 (or 0 alone); recv is NULL off the root */
    uint32_t groot = world > 1 ? 1 : 0;
    int32_t g_send[2] = {(int32_t)rank, -(int32_t)rank}, g_recv[2 * MAXW];
    OK(mw_gather(g, g_send, rank == groot ? g_recv : NULL, 2, MW_I32, groot));
    if (rank == groot)
        for (uint32_t j = 0; j < world; j++)
            CHECK(g_recv[2 * j] == (int32_t)j && g_recv[2 * j + 1] == -(int32_t)j);

    /* scatter from rank 0; send is NULL off the root */
    uint8_t s_send[3 * MAXW], s_recv[3];
    for (uint32_t i = 0; i < 3 * world; i++) s_send[i] = (uint8_t)i;
    OK(mw_scatter(g, rank == 0 ? s_send : NULL, s_recv, 3, MW_U8, 0));
    for (uint32_t k = 0; k < 3; k++) CHECK(s_recv[k] == 3 * rank + k);

    /* scan and exclusive_scan (sum) of rank + 1 */
    int64_t inc = rank + 1, exc = rank + 1;
    OK(mw_scan(g, &inc, 1, MW_I64, MW_SUM));
    OK(mw_exclusive_scan(g, &exc, 1, MW_I64, MW_SUM));
    CHECK(inc == (int64_t)(rank + 1) * (rank + 2) / 2);
    CHECK(exc == (int64_t)rank * (rank + 1) / 2);

    OK(mw_barrier(g));
}

/* A ring: each rank sends 16 bytes to the next under tag 7. */
static void send_recv_ring(mw_group *g) {
    if (world < 2) return;
    uint32_t next = (rank + 1) % world, prev = (rank + world - 1) % world;
    uint8_t out[16], in[16];
    for (int i = 0; i < 16; i++) out[i] = (uint8_t)(rank * 16 + i);
    OK(mw_send(g, out, sizeof out, next, 7));
    OK(mw_recv(g, in, sizeof in, prev, 7));
    for (int i = 0; i < 16; i++) CHECK(in[i] == (uint8_t)(prev * 16 + i));
}

/* Bad input on every rank: refused locally, the group stays usable. */
static void bad_input(mw_group *g) {
    float x[4] = {1, 1, 1, 1};
    INVALID(mw_all_reduce(g, NULL, 4, MW_F32, MW_SUM));
    INVALID(mw_all_reduce(g, x, 4, 99, MW_SUM));
    INVALID(mw_all_reduce(g, x, 4, MW_F32, 77));
    INVALID(mw_broadcast(g, x, 4, MW_F32, world));
    INVALID(mw_all_reduce(g, x, SIZE_MAX, MW_F64, MW_SUM));
    INVALID(mw_all_gather(g, x, x, 1, MW_F32));
    INVALID(mw_send(g, NULL, 8, 0, 1));
    INVALID(mw_barrier(NULL));
    CHECK(strcmp(mw_status_string(MW_INVALID_ARGUMENT), "MW_INVALID_ARGUMENT") == 0);
    CHECK(strcmp(mw_status_string(12345), "MW_UNKNOWN_STATUS") == 0);
    /* Still usable: a barrier and a collective with exact results. */
    OK(mw_barrier(g));
    OK(mw_all_reduce(g, x, 4, MW_F32, MW_SUM));
    for (int i = 0; i < 4; i++) CHECK(x[i] == (float)world);
}

int main(void) {
    mw_group *g = NULL;
    mw_status s = mw_connect_from_env(&g);
    if (s != MW_OK) {
        printf("RESULT err: mw_connect_from_env: %s: %s\n", mw_status_string(s), mw_last_error());
        return 1;
    }
    rank = mw_rank(g);
    world = mw_world_size(g);
    CHECK(world >= 1 && world <= MAXW && rank < world);
    all_reduce_every_dtype(g);
    all_reduce_every_op(g);
    rooted_and_personalised(g);
    send_recv_ring(g);
    bad_input(g);
    OK(mw_shutdown(g));
    mw_free(g);
    printf("RESULT ok rank %u of %u\n", (unsigned)rank, (unsigned)world);
    return 0;
}
