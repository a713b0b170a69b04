/* A profiling tool as mpiP or Score-P is one: MPI_Send, MPI_Recv,
 * MPI_Allreduce and MPI_Finalize defined here, counting calls and bytes,
 * each reaching meshwork's function through its PMPI_ name; the program
 * then runs a ring of messages and an all-reduce through them. Run by
 * mpi/tests/mpi_programs.rs under meshrun; each rank prints what the
 * tool counted, from its MPI_Finalize, or the first check that failed
 * and exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#define ROUNDS 10
#define COUNT 1000

static int rank, size;
static int sends, recvs, allreduces;
static long long sent_bytes, received_bytes;

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
             MPI_Comm comm) {
    int bytes;
    CHECK(PMPI_Type_size(datatype, &bytes) == MPI_SUCCESS);
    sends++;
    sent_bytes += (long long)count * bytes;
    return PMPI_Send(buf, count, datatype, dest, tag, comm);
}

int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
             MPI_Status *status) {
    MPI_Status mine;
    int rc = PMPI_Recv(buf, count, datatype, source, tag, comm, &mine);
    int got;
    CHECK(PMPI_Get_count(&mine, datatype, &got) == MPI_SUCCESS);
    int bytes;
    CHECK(PMPI_Type_size(datatype, &bytes) == MPI_SUCCESS);
    recvs++;
    received_bytes += (long long)got * bytes;
    if (status != MPI_STATUS_IGNORE) {
        *status = mine;
    }
    return rc;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm) {
    allreduces++;
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Finalize(void) {
    printf("profiled rank %d of %d: sends %d (%lld bytes), receives %d (%lld bytes), "
           "all-reduces %d\n",
           rank, size, sends, sent_bytes, recvs, received_bytes, allreduces);
    fflush(stdout);
    return PMPI_Finalize();
}

int main(int argc, char **argv) {
    CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    static int out[COUNT], in[COUNT];
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < COUNT; i++) {
            out[i] = rank * 1000000 + r * COUNT + i;
        }
        /* Even ranks send first; within the budget a send completes
         * before its receive is posted, so any order would do. */
        if (rank % 2 == 0) {
            CHECK(MPI_Send(out, COUNT, MPI_INT, right, r, MPI_COMM_WORLD) == MPI_SUCCESS);
            CHECK(MPI_Recv(in, COUNT, MPI_INT, left, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE) ==
                  MPI_SUCCESS);
        } else {
            CHECK(MPI_Recv(in, COUNT, MPI_INT, left, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE) ==
                  MPI_SUCCESS);
            CHECK(MPI_Send(out, COUNT, MPI_INT, right, r, MPI_COMM_WORLD) == MPI_SUCCESS);
        }
        for (int i = 0; i < COUNT; i++) {
            CHECK(in[i] == left * 1000000 + r * COUNT + i);
        }
    }
    /* The library's own profiling hook does nothing, whatever follows
     * the level. */
    CHECK(PMPI_Pcontrol(2, "tool-specific", 3.5) == MPI_SUCCESS);
    long long mine = rank + 1, total = 0;
    CHECK(MPI_Allreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD) ==
          MPI_SUCCESS);
    CHECK(total == (long long)size * (size + 1) / 2);
    return MPI_Finalize() == MPI_SUCCESS ? 0 : 1;
}
