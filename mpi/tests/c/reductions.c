/* The reductions meshwork's collectives do not have, which the MPI layer
 * folds itself: bitwise and logical operators, MINLOC/MAXLOC on pair
 * types, and a program's own operator (MPI_Op_create) that does not
 * commute, through every reducing collective, blocking and not, in
 * place, and MPI_Reduce_local; operators refused for a type they do not
 * take. Run by mpi/tests/mpi_programs.rs under meshrun; prints
 * "reductions ok" on every rank, or the first check that failed and
 * exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int rank, size;

/* A 2x2 matrix of integers, row by row: products do not commute. */
typedef struct {
    long long m[4];
} Mat;

static Mat mat_of(int r) {
    Mat a = {{r + 1, 1, 1, 0}};
    return a;
}

static Mat mul(Mat a, Mat b) {
    Mat c = {{a.m[0] * b.m[0] + a.m[1] * b.m[2], a.m[0] * b.m[1] + a.m[1] * b.m[3],
              a.m[2] * b.m[0] + a.m[3] * b.m[2], a.m[2] * b.m[1] + a.m[3] * b.m[3]}};
    return c;
}

/* The product of the matrices of ranks lo..hi-1, in rank order. */
static Mat product(int lo, int hi) {
    Mat p = {{1, 0, 0, 1}};
    for (int r = lo; r < hi; r++) {
        p = mul(p, mat_of(r));
    }
    return p;
}

static int same(Mat a, Mat b) { return memcmp(&a, &b, sizeof a) == 0; }

static MPI_Datatype mat_type;
static int calls;

/* inout[i] = in[i] * inout[i]: `in` is the lower ranks' part. */
static void mat_mul(void *in, void *inout, int *len, MPI_Datatype *type) {
    CHECK(*type == mat_type);
    Mat *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        b[i] = mul(a[i], b[i]);
    }
    calls++;
}

static MPI_Datatype strided;

/* On a strided type (two ints, one apart): the first summed, the second
 * the larger; the ints between are not the operator's. */
static void sum_max(void *in, void *inout, int *len, MPI_Datatype *type) {
    CHECK(*type == strided);
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        b[3 * i] += a[3 * i];
        b[3 * i + 2] = a[3 * i + 2] > b[3 * i + 2] ? a[3 * i + 2] : b[3 * i + 2];
    }
}

static void strided_operator(void) {
    MPI_Op op;
    CHECK(MPI_Type_vector(2, 1, 2, MPI_INT, &strided) == MPI_SUCCESS);
    CHECK(MPI_Type_commit(&strided) == MPI_SUCCESS);
    CHECK(MPI_Op_create(sum_max, 1, &op) == MPI_SUCCESS);
    int mine[6] = {rank, 77, 2 * rank, 1, 77, -rank}, all[6] = {0, 77, 0, 0, 77, 0};
    CHECK(MPI_Allreduce(mine, all, 2, strided, op, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(all[0] == size * (size - 1) / 2 && all[2] == 2 * (size - 1));
    CHECK(all[3] == size && all[5] == 0 && all[1] == 77 && all[4] == 77);
    MPI_Op_free(&op);
    MPI_Type_free(&strided);
}

static void bitwise_and_logical(void) {
    unsigned bits = 1u << rank, or = 0, and = 0, xor = 0;
    CHECK(MPI_Allreduce(&bits, &or, 1, MPI_UNSIGNED, MPI_BOR, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(or == (1u << size) - 1);
    unsigned all = ~0u ^ bits;
    CHECK(MPI_Allreduce(&all, &and, 1, MPI_UNSIGNED, MPI_BAND, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(and == ~((1u << size) - 1));
    unsigned three = 3;
    CHECK(MPI_Allreduce(&three, &xor, 1, MPI_UNSIGNED, MPI_BXOR, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(xor == (size % 2 ? 3u : 0u));

    /* Flags: only the last rank's is set; any, all, and odd count. */
    int flag = rank == size - 1 ? 7 : 0, any = -1, every = -1, odd = -1;
    CHECK(MPI_Allreduce(&flag, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(MPI_Allreduce(&flag, &every, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(MPI_Allreduce(&flag, &odd, 1, MPI_INT, MPI_LXOR, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(any == 1 && every == (size == 1) && odd == 1);

    /* In place, on C's bool, from a non-blocking call. */
    _Bool b = rank % 2 == 0;
    MPI_Request req;
    CHECK(MPI_Iallreduce(MPI_IN_PLACE, &b, 1, MPI_C_BOOL, MPI_LAND, MPI_COMM_WORLD, &req) ==
          MPI_SUCCESS);
    CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(b == (size == 1));

    /* Reduce to the last rank, a vector of masks. */
    long long masks[3] = {1LL << rank, 1LL << (rank + 8), rank}, got[3] = {0, 0, -1};
    CHECK(MPI_Reduce(masks, got, 3, MPI_LONG_LONG, MPI_BOR, size - 1, MPI_COMM_WORLD) ==
          MPI_SUCCESS);
    if (rank == size - 1) {
        long long want = (1LL << size) - 1, last = 0;
        for (int r = 0; r < size; r++) {
            last |= r;
        }
        CHECK(got[0] == want && got[1] == want << 8 && got[2] == last);
    } else {
        CHECK(got[2] == -1);
    }
}

static void locations(void) {
    /* Values 10 - |rank - 1|: the max is at rank 1 (or 0 alone), ties
     * at the ends go to the lower rank. */
    struct {
        double v;
        int i;
    } mine = {10 - abs(rank - 1), rank}, lo, hi;
    CHECK(MPI_Allreduce(&mine, &hi, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(hi.v == (size > 1 ? 10 : 9) && hi.i == (size > 1 ? 1 : 0));
    CHECK(MPI_Allreduce(&mine, &lo, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD) == MPI_SUCCESS);
    int low = 10, first = -1;
    for (int r = 0; r < size; r++) {
        if (10 - abs(r - 1) < low) {
            low = 10 - abs(r - 1);
            first = r;
        }
    }
    CHECK(lo.v == low && lo.i == first);

    /* Every rank the same value: the lowest index wins, either way. */
    int pairs[2][2] = {{5, rank}, {-rank, rank}}, out[2][2];
    CHECK(MPI_Allreduce(pairs, out, 2, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(out[0][0] == 5 && out[0][1] == 0 && out[1][0] == 1 - size && out[1][1] == size - 1);
}

static void own_operator(void) {
    MPI_Op op;
    CHECK(MPI_Type_contiguous(4, MPI_LONG_LONG, &mat_type) == MPI_SUCCESS);
    CHECK(MPI_Type_commit(&mat_type) == MPI_SUCCESS);
    CHECK(MPI_Op_create(mat_mul, 0, &op) == MPI_SUCCESS);
    int commute = -1;
    CHECK(MPI_Op_commutative(op, &commute) == MPI_SUCCESS && commute == 0);
    CHECK(MPI_Op_commutative(MPI_SUM, &commute) == MPI_SUCCESS && commute == 1);

    Mat a = mat_of(rank), r;
    CHECK(MPI_Allreduce(&a, &r, 1, mat_type, op, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(same(r, product(0, size)));
    CHECK(size == 1 || calls > 0);

    Mat at_root = {{0, 0, 0, 0}};
    CHECK(MPI_Reduce(&a, &at_root, 1, mat_type, op, 0, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(rank != 0 || same(at_root, product(0, size)));

    Mat scan, exscan = {{-1, -1, -1, -1}};
    CHECK(MPI_Scan(&a, &scan, 1, mat_type, op, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(same(scan, product(0, rank + 1)));
    MPI_Request req;
    CHECK(MPI_Iexscan(&a, &exscan, 1, mat_type, op, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
    CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    if (rank > 0) {
        CHECK(same(exscan, product(0, rank)));
    }

    /* Reduce-scatter: element k of every rank's vector is rank r's
     * matrix times k + 1 on the diagonal; rank k gets their product. */
    Mat *v = malloc(sizeof(Mat) * size), block;
    for (int k = 0; k < size; k++) {
        v[k] = mul(mat_of(rank), (Mat){{k + 1, 0, 0, k + 1}});
    }
    CHECK(MPI_Reduce_scatter_block(v, &block, 1, mat_type, op, MPI_COMM_WORLD) == MPI_SUCCESS);
    Mat want = {{1, 0, 0, 1}};
    for (int r = 0; r < size; r++) {
        want = mul(want, mul(mat_of(r), (Mat){{rank + 1, 0, 0, rank + 1}}));
    }
    CHECK(same(block, want));
    free(v);

    /* Locally: inout = in op inout. */
    Mat in = mat_of(1), inout = mat_of(2);
    CHECK(MPI_Reduce_local(&in, &inout, 1, mat_type, op) == MPI_SUCCESS);
    CHECK(same(inout, mul(mat_of(1), mat_of(2))));
    unsigned x = 6, y = 3;
    CHECK(MPI_Reduce_local(&x, &y, 1, MPI_UNSIGNED, MPI_BXOR) == MPI_SUCCESS && y == 5);

    CHECK(MPI_Op_free(&op) == MPI_SUCCESS && op == MPI_OP_NULL);
    MPI_Type_free(&mat_type);
}

static void refusals(void) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    float f = 1, g;
    int i = 1, j, class;
    CHECK(MPI_Error_class(MPI_Allreduce(&f, &g, 1, MPI_FLOAT, MPI_BAND, MPI_COMM_WORLD), &class) ==
              MPI_SUCCESS &&
          class == MPI_ERR_OP);
    CHECK(MPI_Error_class(MPI_Allreduce(&i, &j, 1, MPI_INT, MPI_MINLOC, MPI_COMM_WORLD), &class) ==
              MPI_SUCCESS &&
          class == MPI_ERR_OP);
    MPI_Op sum = MPI_SUM;
    CHECK(MPI_Error_class(MPI_Op_free(&sum), &class) == MPI_SUCCESS && class == MPI_ERR_OP);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv) {
    CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bitwise_and_logical();
    locations();
    own_operator();
    strided_operator();
    refusals();
    printf("reductions ok on rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
