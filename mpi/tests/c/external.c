/* The portable external32 representation: the exact big-endian bytes of
 * ints, a C long (4 bytes there), doubles, a long double (an IEEE quad)
 * and a (value, index) pair; a struct and a subarray walked in their
 * type map's order; a packed buffer sent as MPI_PACKED around a ring and
 * unpacked; the _c forms; an unknown representation, no room and a long
 * too large refused. Prints "external ok" on each rank. */
#include <mpi.h>
#include <stddef.h>
#include <wchar.h>
#include <string.h>

#include "check.h"

static int rank, size;

static int error_class(int err) {
    int cls = -1;
    MPI_Error_class(err, &cls);
    return cls;
}

static void exact_bytes(void) {
    unsigned char buf[64];
    MPI_Aint pos = 0, n = -1;

    int ints[2] = {0x01020304, -2};
    MPI_Pack_external("external32", ints, 2, MPI_INT, buf, sizeof buf, &pos);
    static const unsigned char want_ints[8] = {1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe};
    CHECK(pos == 8 && memcmp(buf, want_ints, 8) == 0);

    long l = -5;
    MPI_Pack_external_size("external32", 1, MPI_LONG, &n);
    CHECK(n == 4);
    pos = 0;
    MPI_Pack_external("external32", &l, 1, MPI_LONG, buf, sizeof buf, &pos);
    static const unsigned char want_long[4] = {0xff, 0xff, 0xff, 0xfb};
    CHECK(pos == 4 && memcmp(buf, want_long, 4) == 0);

    /* A wchar_t in 2 bytes. */
    wchar_t w = L'A';
    MPI_Pack_external_size("external32", 1, MPI_WCHAR, &n);
    CHECK(n == 2);
    pos = 0;
    MPI_Pack_external("external32", &w, 1, MPI_WCHAR, buf, sizeof buf, &pos);
    CHECK(pos == 2 && buf[0] == 0 && buf[1] == 'A');

    double d = 1.0;
    pos = 0;
    MPI_Pack_external("external32", &d, 1, MPI_DOUBLE, buf, sizeof buf, &pos);
    static const unsigned char want_double[8] = {0x3f, 0xf0, 0, 0, 0, 0, 0, 0};
    CHECK(pos == 8 && memcmp(buf, want_double, 8) == 0);

    long double q = 1.5L, qback = 0;
    pos = 0;
    MPI_Pack_external("external32", &q, 1, MPI_LONG_DOUBLE, buf, sizeof buf, &pos);
    CHECK(pos == 16 && buf[0] == 0x3f && buf[1] == 0xff && buf[2] == 0x80 && buf[15] == 0);
    pos = 0;
    MPI_Unpack_external("external32", buf, 16, &pos, &qback, 1, MPI_LONG_DOUBLE);
    CHECK(qback == 1.5L);

    /* A pair without its padding: 8 + 4 bytes. */
    struct {
        double v;
        int i;
    } pair = {2.0, 7}, pback = {0, 0};
    MPI_Pack_external_size("external32", 1, MPI_DOUBLE_INT, &n);
    CHECK(n == 12);
    pos = 0;
    MPI_Pack_external("external32", &pair, 1, MPI_DOUBLE_INT, buf, sizeof buf, &pos);
    CHECK(pos == 12 && buf[0] == 0x40 && buf[11] == 7);
    pos = 0;
    MPI_Unpack_external("external32", buf, 12, &pos, &pback, 1, MPI_DOUBLE_INT);
    CHECK(pback.v == 2.0 && pback.i == 7);
}

struct rec {
    char c;
    double d;
    long l;
};

static MPI_Datatype rec_type(void) {
    int lens[3] = {1, 1, 1};
    MPI_Aint displs[3] = {offsetof(struct rec, c), offsetof(struct rec, d),
                          offsetof(struct rec, l)};
    MPI_Datatype types[3] = {MPI_CHAR, MPI_DOUBLE, MPI_LONG}, t;
    MPI_Type_create_struct(3, lens, displs, types, &t);
    MPI_Type_commit(&t);
    return t;
}

static void ring(void) {
    /* Two records and a 2x2 block of a 3x4 int array (C order), packed
     * one after the other, passed to the next rank as MPI_PACKED. */
    MPI_Datatype rt = rec_type(), sub;
    int sizes[2] = {3, 4}, subs[2] = {2, 2}, starts[2] = {1, 1};
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub);
    MPI_Type_commit(&sub);
    MPI_Aint n1 = 0, n2 = 0;
    MPI_Pack_external_size("external32", 2, rt, &n1);
    MPI_Pack_external_size("external32", 1, sub, &n2);
    CHECK(n1 == 2 * (1 + 8 + 4) && n2 == 4 * 4);

    struct rec out[2] = {{'a', 1.25 + rank, -rank}, {'b', -0.5, 100000 + rank}}, in[2];
    int grid[3][4], got[3][4];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) grid[i][j] = 100 * rank + 10 * i + j, got[i][j] = -1;
    unsigned char buf[64];
    MPI_Aint pos = 0;
    MPI_Pack_external("external32", out, 2, rt, buf, sizeof buf, &pos);
    MPI_Pack_external("external32", grid, 1, sub, buf, sizeof buf, &pos);
    CHECK(pos == n1 + n2);
    /* The first record: its char, its double, its long as 4 bytes. */
    int l0 = (int)((unsigned)buf[9] << 24 | (unsigned)buf[10] << 16 | (unsigned)buf[11] << 8 |
                   buf[12]);
    CHECK(buf[0] == 'a' && (buf[1] == 0x3f || buf[1] == 0x40) && l0 == -rank);

    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    unsigned char inbuf[64];
    MPI_Sendrecv(buf, (int)pos, MPI_PACKED, next, 3, inbuf, sizeof inbuf, MPI_PACKED, prev, 3,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    pos = 0;
    MPI_Unpack_external("external32", inbuf, n1 + n2, &pos, in, 2, rt);
    MPI_Unpack_external("external32", inbuf, n1 + n2, &pos, got, 1, sub);
    CHECK(pos == n1 + n2);
    CHECK(in[0].c == 'a' && in[0].d == 1.25 + prev && in[0].l == -prev);
    CHECK(in[1].c == 'b' && in[1].d == -0.5 && in[1].l == 100000 + prev);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            int inside = i >= 1 && j >= 1 && j <= 2;
            CHECK(got[i][j] == (inside ? 100 * prev + 10 * i + j : -1));
        }

    /* The _c forms. */
    MPI_Count cpos = 0, cn = 0;
    MPI_Pack_external_size_c("external32", 2, rt, &cn);
    CHECK(cn == n1);
    MPI_Pack_external_c("external32", out, 2, rt, buf, sizeof buf, &cpos);
    CHECK(cpos == n1);
    cpos = 0;
    memset(in, 0, sizeof in);
    MPI_Unpack_external_c("external32", buf, n1, &cpos, in, 2, rt);
    CHECK(in[1].l == 100000 + rank && in[0].d == 1.25 + rank);
    MPI_Type_free(&sub);
    MPI_Type_free(&rt);
}

static void refusals(void) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int x = 1;
    unsigned char buf[8];
    MPI_Aint pos = 0, n = 0;
    CHECK(error_class(MPI_Pack_external("native", &x, 1, MPI_INT, buf, 8, &pos)) ==
          MPI_ERR_UNSUPPORTED_DATAREP);
    CHECK(error_class(MPI_Pack_external_size("XDR", 1, MPI_INT, &n)) ==
          MPI_ERR_UNSUPPORTED_DATAREP);
    pos = 6;
    CHECK(error_class(MPI_Pack_external("external32", &x, 1, MPI_INT, buf, 8, &pos)) ==
          MPI_ERR_TRUNCATE);
    CHECK(pos == 6);
    if (sizeof(long) == 8) {
        long big = 1L << 40;
        pos = 0;
        CHECK(error_class(MPI_Pack_external("external32", &big, 1, MPI_LONG, buf, 8, &pos)) ==
              MPI_ERR_CONVERSION);
    }
    pos = 0;
    CHECK(error_class(MPI_Unpack_external("external32", buf, 2, &pos, &x, 1, MPI_INT)) ==
          MPI_ERR_TRUNCATE);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    exact_bytes();
    ring();
    refusals();
    MPI_Finalize();
    printf("external ok\n");
    return 0;
}
