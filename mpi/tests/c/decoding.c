/* Datatype decoding (envelope and contents of every constructor, the
 * _c forms' counts), subarrays (C and Fortran order, moved between
 * ranks), type names, the (value, index) pair types, Fortran kinds and
 * MPI_Dims_create.
 * Prints "decoding ok" on each rank. */
#include <mpi.h>
#include <string.h>

#include "check.h"

static int rank, size;

/* Check t's envelope; its contents go to ints, addrs and types. */
static void envelope(MPI_Datatype t, int ni, int na, int nd, int combiner, int *ints,
                     MPI_Aint *addrs, MPI_Datatype *types) {
    int i = -1, a = -1, d = -1, c = -1;
    MPI_Type_get_envelope(t, &i, &a, &d, &c);
    CHECK(i == ni && a == na && d == nd && c == combiner);
    MPI_Type_get_contents(t, ni, na, nd, ints, addrs, types);
}

static void decode(void) {
    int ints[16];
    MPI_Aint addrs[8];
    MPI_Datatype types[4], t, u;
    int i, a, d, c;

    MPI_Type_get_envelope(MPI_DOUBLE, &i, &a, &d, &c);
    CHECK(c == MPI_COMBINER_NAMED && i == 0 && a == 0 && d == 0);

    MPI_Type_contiguous(3, MPI_INT, &t);
    envelope(t, 1, 0, 1, MPI_COMBINER_CONTIGUOUS, ints, addrs, types);
    CHECK(ints[0] == 3 && types[0] == MPI_INT);

    /* A vector of that: the old type comes back as a new handle of the
     * same type, which the caller frees, even after the original is. */
    MPI_Type_vector(2, 1, 4, t, &u);
    MPI_Type_free(&t);
    envelope(u, 3, 0, 1, MPI_COMBINER_VECTOR, ints, addrs, types);
    CHECK(ints[0] == 2 && ints[1] == 1 && ints[2] == 4 && types[0] != MPI_INT);
    int sz = 0;
    MPI_Type_size(types[0], &sz);
    CHECK(sz == 3 * (int)sizeof(int));
    envelope(types[0], 1, 0, 1, MPI_COMBINER_CONTIGUOUS, ints, addrs, types + 1);
    CHECK(ints[0] == 3 && types[1] == MPI_INT);
    MPI_Type_free(&types[0]);
    MPI_Type_free(&u);

    MPI_Type_create_hvector(2, 3, 100, MPI_CHAR, &t);
    envelope(t, 2, 1, 1, MPI_COMBINER_HVECTOR, ints, addrs, types);
    CHECK(ints[0] == 2 && ints[1] == 3 && addrs[0] == 100 && types[0] == MPI_CHAR);
    MPI_Type_free(&t);

    int lens[3] = {1, 2, 3}, at[3] = {0, 5, 9};
    MPI_Aint bytes[3] = {0, 40, 80};
    MPI_Type_indexed(3, lens, at, MPI_FLOAT, &t);
    envelope(t, 7, 0, 1, MPI_COMBINER_INDEXED, ints, addrs, types);
    CHECK(ints[0] == 3 && ints[1] == 1 && ints[3] == 3 && ints[4] == 0 && ints[6] == 9);
    MPI_Type_free(&t);
    MPI_Type_create_hindexed(3, lens, bytes, MPI_FLOAT, &t);
    envelope(t, 4, 3, 1, MPI_COMBINER_HINDEXED, ints, addrs, types);
    CHECK(ints[0] == 3 && ints[2] == 2 && addrs[1] == 40 && addrs[2] == 80);
    MPI_Type_free(&t);
    MPI_Type_create_indexed_block(3, 2, at, MPI_FLOAT, &t);
    envelope(t, 5, 0, 1, MPI_COMBINER_INDEXED_BLOCK, ints, addrs, types);
    CHECK(ints[0] == 3 && ints[1] == 2 && ints[3] == 5);
    MPI_Type_free(&t);
    MPI_Type_create_hindexed_block(3, 2, bytes, MPI_FLOAT, &t);
    envelope(t, 2, 3, 1, MPI_COMBINER_HINDEXED_BLOCK, ints, addrs, types);
    CHECK(ints[1] == 2 && addrs[2] == 80);
    MPI_Type_free(&t);

    MPI_Datatype parts[2] = {MPI_INT, MPI_DOUBLE};
    int two[2] = {1, 2};
    MPI_Aint where[2] = {0, 8};
    MPI_Type_create_struct(2, two, where, parts, &t);
    envelope(t, 3, 2, 2, MPI_COMBINER_STRUCT, ints, addrs, types);
    CHECK(ints[0] == 2 && ints[2] == 2 && addrs[1] == 8);
    CHECK(types[0] == MPI_INT && types[1] == MPI_DOUBLE);
    MPI_Type_create_resized(t, -8, 64, &u);
    envelope(u, 0, 2, 1, MPI_COMBINER_RESIZED, ints, addrs, types);
    CHECK(addrs[0] == -8 && addrs[1] == 64 && types[0] != t);
    MPI_Type_free(&types[0]);
    MPI_Type_free(&u);
    MPI_Type_dup(t, &u);
    envelope(u, 0, 0, 1, MPI_COMBINER_DUP, ints, addrs, types);
    MPI_Type_free(&types[0]);
    MPI_Type_free(&u);
    MPI_Type_free(&t);

    /* A _c constructor's arguments are counts: the int envelope refuses
     * them, the _c one gives them. */
    MPI_Count lc[8], ni, na, nc, nd;
    MPI_Type_vector_c(5, 2, 7, MPI_INT, &t);
    MPI_Type_get_envelope_c(t, &ni, &na, &nc, &nd, &c);
    CHECK(ni == 0 && na == 0 && nc == 3 && nd == 1 && c == MPI_COMBINER_VECTOR);
    MPI_Type_get_contents_c(t, 0, 0, 3, 1, NULL, NULL, lc, types);
    CHECK(lc[0] == 5 && lc[1] == 2 && lc[2] == 7 && types[0] == MPI_INT);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0;
    MPI_Error_class(MPI_Type_get_envelope(t, &i, &a, &d, &c), &cls);
    CHECK(cls == MPI_ERR_TYPE);
    /* Too little room, and a predefined type's contents: refused. */
    MPI_Error_class(MPI_Type_get_contents_c(t, 0, 0, 2, 1, NULL, NULL, lc, types), &cls);
    CHECK(cls == MPI_ERR_ARG);
    MPI_Error_class(MPI_Type_get_contents(MPI_INT, 0, 0, 0, NULL, NULL, NULL), &cls);
    CHECK(cls == MPI_ERR_ARG);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Type_free(&t);
}

static void subarrays(void) {
    /* The 2x3 block at (1, 2) of a 4x6 array of ints, in C order; its
     * extent is the whole array's. */
    int sizes[2] = {4, 6}, subs[2] = {2, 3}, starts[2] = {1, 2}, a[24], b[24];
    MPI_Datatype t;
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t);
    MPI_Type_commit(&t);
    int sz = 0;
    MPI_Aint lb = -1, ext = -1;
    MPI_Type_size(t, &sz);
    MPI_Type_get_extent(t, &lb, &ext);
    CHECK(sz == 6 * (int)sizeof(int) && lb == 0 && ext == 24 * (int)sizeof(int));
    int ints[8];
    MPI_Aint none[1];
    MPI_Datatype old;
    envelope(t, 8, 0, 1, MPI_COMBINER_SUBARRAY, ints, none, &old);
    CHECK(ints[0] == 2 && ints[1] == 4 && ints[4] == 3 && ints[6] == 2 && ints[7] == MPI_ORDER_C);
    /* From each rank's array to the next rank's, the block only. */
    for (int i = 0; i < 24; i++) a[i] = rank * 100 + i, b[i] = -1;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Sendrecv(a, 1, t, next, 3, b, 1, t, prev, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int r = 0; r < 4; r++)
        for (int col = 0; col < 6; col++) {
            int in = r >= 1 && r < 3 && col >= 2 && col < 5;
            CHECK(b[r * 6 + col] == (in ? prev * 100 + r * 6 + col : -1));
        }
    MPI_Type_free(&t);
    /* Fortran order: the first index runs fastest. The block at (1, 0)
     * of size 2x2 of a 3x2 array (column-major) is elements 1, 2, 4, 5. */
    int fs[2] = {3, 2}, fsub[2] = {2, 2}, fst[2] = {1, 0}, packed[4];
    MPI_Type_create_subarray(2, fs, fsub, fst, MPI_ORDER_FORTRAN, MPI_INT, &t);
    MPI_Type_commit(&t);
    MPI_Sendrecv(a, 1, t, rank, 4, packed, 4, MPI_INT, rank, 4, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    CHECK(packed[0] == a[1] && packed[1] == a[2] && packed[2] == a[4] && packed[3] == a[5]);
    MPI_Type_free(&t);
    /* A block that does not fit, and an order of neither kind. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0, wide[2] = {2, 6};
    MPI_Error_class(MPI_Type_create_subarray(2, sizes, wide, starts, MPI_ORDER_C, MPI_INT, &t),
                    &cls);
    CHECK(cls == MPI_ERR_ARG);
    MPI_Error_class(MPI_Type_create_subarray(2, sizes, subs, starts, 0, MPI_INT, &t), &cls);
    CHECK(cls == MPI_ERR_ARG);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    /* The _c form: counts, but ndims and the order stay ints. */
    MPI_Count csz[2] = {4, 6}, csub[2] = {2, 3}, cst[2] = {1, 2}, lc[6], ni, na, nc, nd;
    int comb = 0;
    MPI_Type_create_subarray_c(2, csz, csub, cst, MPI_ORDER_C, MPI_INT, &t);
    MPI_Type_get_envelope_c(t, &ni, &na, &nc, &nd, &comb);
    CHECK(ni == 2 && na == 0 && nc == 6 && nd == 1 && comb == MPI_COMBINER_SUBARRAY);
    MPI_Type_get_contents_c(t, 2, 0, 6, 1, ints, NULL, lc, &old);
    CHECK(ints[0] == 2 && ints[1] == MPI_ORDER_C && lc[0] == 4 && lc[5] == 2);
    MPI_Type_free(&t);
}

static void names_and_pairs(void) {
    MPI_Datatype t, pair;
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    MPI_Type_contiguous(2, MPI_INT, &t);
    MPI_Type_get_name(t, name, &len);
    CHECK(len == 0);
    MPI_Type_set_name(t, "pair of ints");
    MPI_Type_get_name(t, name, &len);
    CHECK(strcmp(name, "pair of ints") == 0 && len == 12);
    MPI_Type_free(&t);
    MPI_Type_get_name(MPI_DATATYPE_NULL, name, &len);
    CHECK(strcmp(name, "MPI_DATATYPE_NULL") == 0);
    MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &pair);
    CHECK(pair == MPI_DOUBLE_INT);
    MPI_Type_get_value_index(MPI_INT, MPI_INT, &pair);
    CHECK(pair == MPI_2INT);
    MPI_Type_get_value_index(MPI_DOUBLE, MPI_FLOAT, &pair);
    CHECK(pair == MPI_DATATYPE_NULL);
}

static void fortran_kinds(void) {
    /* The smallest kinds that hold the precision and range asked for,
     * the same handle each time, with the envelope of how they were
     * asked for, and no free. */
    MPI_Datatype r6, r15, again, c15, i4;
    int sz = 0, ints[2], i, a, d, c;
    MPI_Type_create_f90_real(6, 30, &r6);
    MPI_Type_create_f90_real(15, MPI_UNDEFINED, &r15);
    MPI_Type_create_f90_real(6, 30, &again);
    CHECK(again == r6 && r6 != r15);
    MPI_Type_size(r6, &sz);
    CHECK(sz == 4);
    MPI_Type_size(r15, &sz);
    CHECK(sz == 8);
    MPI_Type_create_f90_complex(15, 300, &c15);
    MPI_Type_size(c15, &sz);
    CHECK(sz == 16);
    MPI_Type_create_f90_integer(9, &i4);
    MPI_Type_size(i4, &sz);
    CHECK(sz == 4);
    MPI_Type_get_envelope(r6, &i, &a, &d, &c);
    CHECK(c == MPI_COMBINER_F90_REAL && i == 2 && a == 0 && d == 0);
    MPI_Type_get_contents(r6, 2, 0, 0, ints, NULL, NULL);
    CHECK(ints[0] == 6 && ints[1] == 30);
    MPI_Type_get_envelope(i4, &i, &a, &d, &c);
    CHECK(c == MPI_COMBINER_F90_INTEGER && i == 1);
    /* Moved as doubles between ranks. */
    double x = rank + 0.5, y = -1;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Sendrecv(&x, 1, r15, next, 8, &y, 1, r15, prev, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(y == prev + 0.5);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0;
    MPI_Error_class(MPI_Type_free(&r6), &cls);
    CHECK(cls == MPI_ERR_TYPE && r6 == again);
    MPI_Error_class(MPI_Type_create_f90_real(40, 5000, &again), &cls);
    CHECK(cls == MPI_ERR_ARG);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void dims(void) {
    int d2[2] = {0, 0}, d3[3] = {0, 3, 0}, d1[1] = {0};
    MPI_Dims_create(12, 2, d2);
    CHECK(d2[0] == 4 && d2[1] == 3);
    MPI_Dims_create(24, 3, d3);
    CHECK(d3[0] == 4 && d3[1] == 3 && d3[2] == 2);
    MPI_Dims_create(7, 1, d1);
    CHECK(d1[0] == 7);
    int cube[3] = {0, 0, 0};
    MPI_Dims_create(size * 8, 3, cube);
    CHECK(cube[0] * cube[1] * cube[2] == size * 8 && cube[0] >= cube[1] && cube[1] >= cube[2]);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0, bad[2] = {5, 0};
    MPI_Error_class(MPI_Dims_create(12, 2, bad), &cls);
    CHECK(cls == MPI_ERR_DIMS);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    decode();
    subarrays();
    names_and_pairs();
    fortran_kinds();
    dims();
    MPI_Barrier(MPI_COMM_WORLD);
    printf("decoding ok on rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
