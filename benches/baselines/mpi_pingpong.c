/* Open MPI ping-pong baseline for benches/p2p.rs: rank 0 sends, rank 1
 * echoes; one-way time = round trip / 2. Prints ROW pingpong <bytes>
 * <one_way_us> <wrong>. Usage: mpi_pingpong "<bytes,...>" "<iters,...>" */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parse_list.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long sizes[64], iters[64];
    int n = parse(argc > 1 ? argv[1] : "8", sizes, 64);
    parse(argc > 2 ? argv[2] : "1000", iters, 64);
    for (int k = 0; k < n; k++) {
        long bytes = sizes[k], it = iters[k], wrong = 0;
        unsigned char *buf = malloc(bytes + 1);
        for (long i = 0; i < bytes; i++) buf[i] = (unsigned char)(i * 7);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0;
        /* Untimed warm-up rounds, as benches/p2p.rs takes them. */
        long warm = it / 10 + 2;
        for (long r = 0; r < it + warm; r++) {
            if (r == warm) t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            }
        }
        double one_way = (MPI_Wtime() - t0) / it / 2;
        for (long i = 0; i < bytes; i++) wrong += buf[i] != (unsigned char)(i * 7);
        if (rank == 0) printf("ROW pingpong %ld %.3f %ld\n", bytes, one_way * 1e6, wrong);
        fflush(stdout);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
