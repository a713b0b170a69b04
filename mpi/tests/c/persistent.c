/* Persistent collectives (MPI-4): made once, started again and again on
 * buffers the program refills in between, as an iterative solver does;
 * MPI_Startall over several, the v forms, the _c forms (one whose count
 * arrays the request keeps), and requests freed once inactive. Prints "persistent ok" on each rank. */
#include <mpi.h>

#include "check.h"

static int rank, size;

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 16);

    /* An all-reduce and a broadcast, started together each round. */
    double x[4], sum[4];
    int token = -1;
    MPI_Request r[3];
    MPI_Allreduce_init(x, sum, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r[0]);
    MPI_Bcast_init(&token, 1, MPI_INT, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &r[1]);
    MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &r[2]);
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < 4; i++) x[i] = rank + round * 10 + i;
        token = rank == size - 1 ? round * 7 : -1;
        MPI_Startall(3, r);
        MPI_Waitall(3, r, MPI_STATUSES_IGNORE);
        /* Inactive again, not freed. */
        CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL);
        for (int i = 0; i < 4; i++)
            CHECK(sum[i] == size * (size - 1) / 2.0 + size * (round * 10 + i));
        CHECK(token == round * 7);
    }

    /* A v form: rank i gives i + 1 ints to everyone. */
    int mine[16], all[16 * 17 / 2], counts[16], displs[16];
    for (int i = 0, d = 0; i < size; d += ++i) counts[i] = i + 1, displs[i] = d;
    MPI_Request v;
    MPI_Allgatherv_init(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD,
                        MPI_INFO_NULL, &v);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i <= rank; i++) mine[i] = rank * 100 + i + round;
        MPI_Start(&v);
        MPI_Wait(&v, MPI_STATUS_IGNORE);
        for (int i = 0, k = 0; i < size; i++)
            for (int j = 0; j <= i; j++, k++) CHECK(all[k] == i * 100 + j + round);
    }

    /* The same through the _c form, whose counts the request keeps. */
    MPI_Count ccounts[16];
    MPI_Aint cdispls[16];
    for (int i = 0; i < size; i++) ccounts[i] = counts[i], cdispls[i] = displs[i];
    MPI_Request vc;
    MPI_Allgatherv_init_c(mine, rank + 1, MPI_INT, all, ccounts, cdispls, MPI_INT,
                          MPI_COMM_WORLD, MPI_INFO_NULL, &vc);
    for (int i = 0; i < size; i++) ccounts[i] = -1, cdispls[i] = -1;
    for (int i = 0; i <= rank; i++) mine[i] = -rank - i;
    MPI_Start(&vc);
    MPI_Wait(&vc, MPI_STATUS_IGNORE);
    for (int i = 0, k = 0; i < size; i++)
        for (int j = 0; j <= i; j++, k++) CHECK(all[k] == -i - j);
    MPI_Request_free(&vc);

    /* A _c form, a rooted one, and a scan. */
    long long part = rank + 1, total = 0, prefix = 0;
    MPI_Request c[2];
    MPI_Reduce_init_c(&part, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD, MPI_INFO_NULL,
                      &c[0]);
    MPI_Scan_init(&part, &prefix, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &c[1]);
    for (int round = 1; round <= 2; round++) {
        part = (rank + 1) * round;
        MPI_Startall(2, c);
        MPI_Waitall(2, c, MPI_STATUSES_IGNORE);
        if (rank == 0) CHECK(total == (long long)round * size * (size + 1) / 2);
        CHECK(prefix == (long long)round * (rank + 1) * (rank + 2) / 2);
    }

    /* Started twice without a wait: refused; freed, it is gone. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Start(&r[2]);
    int cls = 0;
    MPI_Error_class(MPI_Start(&r[2]), &cls);
    CHECK(cls == MPI_ERR_REQUEST);
    MPI_Wait(&r[2], MPI_STATUS_IGNORE);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    for (int i = 0; i < 3; i++) {
        MPI_Request_free(&r[i]);
        CHECK(r[i] == MPI_REQUEST_NULL);
    }
    MPI_Request_free(&v);
    MPI_Request_free(&c[0]);
    MPI_Request_free(&c[1]);

    MPI_Barrier(MPI_COMM_WORLD);
    printf("persistent ok on rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
