/* Open MPI one-sided baseline for benches/one_sided.rs: two ranks; rank 0
 * against rank 1's window (passive target, MPI_Win_lock_all), each
 * operation completed at the target with MPI_Win_flush before the next,
 * as meshwork's blocking put is. Beside them, in the same run, a send/recv
 * ping-pong's round trip and a send answered by one byte. Prints
 * ROW <name> <bytes> <us> 0 with the names benches/one_sided.rs reads. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#define SMALL_ITERS 5000
#define HEAP (32L << 20)

static long iters_for(long n) {
    long it = (256L << 20) / n;
    return it < 10 ? 10 : it > 200 ? 200 : it;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long sizes[2] = {1L << 20, 16L << 20};
    unsigned char small[8] = {0};
    unsigned char ack = 0;
    double t0;
    /* Two-sided. */
    MPI_Barrier(MPI_COMM_WORLD);
    for (long r = 0; r < SMALL_ITERS + 10; r++) {
        if (r == 10) t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(small, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(small, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(small, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(small, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) printf("ROW rtt 8 %.3f 0\n", (MPI_Wtime() - t0) / SMALL_ITERS * 1e6);
    for (int k = 0; k < 2; k++) {
        long n = sizes[k], it = iters_for(n);
        unsigned char *buf = calloc(n, 1);
        MPI_Barrier(MPI_COMM_WORLD);
        for (long r = 0; r < it + 10; r++) {
            if (r == 10) t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(&ack, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(&ack, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) printf("ROW send %ld %.3f 0\n", n, (MPI_Wtime() - t0) / it * 1e6);
        free(buf);
    }
    /* One-sided: rank 1 waits in the barrier meanwhile. */
    unsigned char *base;
    MPI_Win win;
    MPI_Win_allocate(HEAP, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, HEAP);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock_all(0, win);
        uint64_t one = 1, prev;
        for (int op = 0; op < 3; op++) {
            for (long r = 0; r < SMALL_ITERS + 10; r++) {
                if (r == 10) t0 = MPI_Wtime();
                if (op == 0) MPI_Put(small, 8, MPI_BYTE, 1, 0, 8, MPI_BYTE, win);
                if (op == 1) MPI_Get(small, 8, MPI_BYTE, 1, 0, 8, MPI_BYTE, win);
                if (op == 2) MPI_Fetch_and_op(&one, &prev, MPI_UINT64_T, 1, 0, MPI_SUM, win);
                MPI_Win_flush(1, win);
            }
            const char *name = op == 0 ? "put" : op == 1 ? "get" : "fetch_add";
            printf("ROW %s 8 %.3f 0\n", name, (MPI_Wtime() - t0) / SMALL_ITERS * 1e6);
        }
        for (int k = 0; k < 2; k++) {
            long n = sizes[k], it = iters_for(n);
            unsigned char *buf = calloc(n, 1);
            for (int op = 0; op < 2; op++) {
                for (long r = 0; r < it + 10; r++) {
                    if (r == 10) t0 = MPI_Wtime();
                    if (op == 0) MPI_Put(buf, n, MPI_BYTE, 1, 0, n, MPI_BYTE, win);
                    else MPI_Get(buf, n, MPI_BYTE, 1, 0, n, MPI_BYTE, win);
                    MPI_Win_flush(1, win);
                }
                printf("ROW %s %ld %.3f 0\n", op == 0 ? "put" : "get", n, (MPI_Wtime() - t0) / it * 1e6);
            }
            free(buf);
        }
        MPI_Win_unlock_all(win);
        fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
