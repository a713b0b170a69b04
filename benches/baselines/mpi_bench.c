/* Open MPI baseline for benches/net.rs: the same collectives, sizes and
 * iteration counts, the same timing (barrier, N calls, max over ranks of the
 * mean), the same verification. Prints one line per measurement:
 *   ROW <collective> <bytes> <time_us> <wrong>
 * Usage: mpi_bench "<bytes,...>" "<iters,...>"   (same length lists) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parse_list.h"

static float val(int rank, long i) { return (float)((rank * 31 + i) % 97); }

/* One call of collective c on a (count total) and b. */
static void call(int c, float *a, float *b, long total, long block) {
    switch (c) {
    case 0: MPI_Allreduce(MPI_IN_PLACE, a, total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case 1: MPI_Bcast(a, total, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case 2: MPI_Allgather(a, block, MPI_FLOAT, b, block, MPI_FLOAT, MPI_COMM_WORLD); break;
    case 3: MPI_Reduce_scatter_block(a, b, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case 4: MPI_Alltoall(a, block, MPI_FLOAT, b, block, MPI_FLOAT, MPI_COMM_WORLD); break;
    default: MPI_Barrier(MPI_COMM_WORLD); break;
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    long sizes[64], iters[64];
    int n = parse(argc > 1 ? argv[1] : "4096", sizes, 64);
    parse(argc > 2 ? argv[2] : "10", iters, 64);
    const char *colls[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "barrier"};
    for (int c = 0; c < 6; c++) {
        for (int k = 0; k < n; k++) {
            long bytes = sizes[k], total = bytes / 4, block = total / p;
            if (c == 5 && k > 0) break; /* barrier: one row */
            float *a = malloc((total + 1) * sizeof(float)), *b = malloc((total + 1) * sizeof(float));
            for (long i = 0; i < total; i++) a[i] = val(rank, i);
            long it = iters[k], wrong = 0;
            for (int rep = 0; rep < 2; rep++) call(c, a, b, total, block); /* warm-up */
            /* timed: barrier, it calls, the mean, the slowest rank */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long r = 0; r < it; r++) call(c, a, b, total, block);
            double mine = (MPI_Wtime() - t0) / it, slowest;
            MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            /* verify one fresh call */
            for (long i = 0; i < total; i++) a[i] = val(rank, i);
            call(c, a, b, total, block);
            switch (c) {
            case 0:
                for (long i = 0; i < total; i++) { float s = 0; for (int q = 0; q < p; q++) s += val(q, i); wrong += a[i] != s; }
                break;
            case 1:
                for (long i = 0; i < total; i++) wrong += a[i] != val(0, i);
                break;
            case 2:
                for (long i = 0; i < block * p; i++) wrong += b[i] != val(i / block, i % block);
                break;
            case 3:
                for (long i = 0; i < block; i++) { float s = 0; for (int q = 0; q < p; q++) s += val(q, rank * block + i); wrong += b[i] != s; }
                break;
            case 4:
                for (long i = 0; i < block * p; i++) wrong += b[i] != val(i / block, rank * block + i % block);
                break;
            default: break;
            }
            long all_wrong;
            MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            if (rank == 0) printf("ROW %s %ld %.3f %ld\n", colls[c], c == 5 ? 0 : bytes, slowest * 1e6, all_wrong);
            fflush(stdout);
            free(a); free(b);
        }
    }
    MPI_Finalize();
    return 0;
}
