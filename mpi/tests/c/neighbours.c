/* The neighbourhood collectives on every kind of topology: a periodic
 * ring as a grid (whose two neighbours are one rank on 1 and 2 ranks:
 * a block sent up must still arrive as its receiver's block from below),
 * a grid with MPI_PROC_NULL past its edges (whose blocks are left
 * alone), a graph, and a distributed graph with a type per block; the
 * blocking, non-blocking, persistent and _c forms; a communicator with
 * no topology and MPI_IN_PLACE refused. Prints "neighbours ok" on each
 * rank. */
#include <mpi.h>

#include "check.h"

static int rank, size;

static int error_class(int err) {
    int cls = -1;
    MPI_Error_class(err, &cls);
    return cls;
}

static void ring(void) {
    int periods[1] = {1}, dims[1] = {size};
    MPI_Comm ring;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring);
    int below = (rank + size - 1) % size, above = (rank + 1) % size;

    /* Block 0 goes down, block 1 up; block 0 comes from below (what that
     * rank sent up), block 1 from above (what it sent down). */
    int send[2] = {100 * rank, 100 * rank + 1}, recv[2] = {-1, -1};
    CHECK(MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, ring) == MPI_SUCCESS);
    CHECK(recv[0] == 100 * below + 1 && recv[1] == 100 * above);

    int got[2] = {-1, -1};
    MPI_Neighbor_allgather(&rank, 1, MPI_INT, got, 1, MPI_INT, ring);
    CHECK(got[0] == below && got[1] == above);

    /* Non-blocking, and the _c form. */
    MPI_Request req;
    int twice = 2 * rank;
    got[0] = got[1] = -1;
    MPI_Ineighbor_allgather(&twice, 1, MPI_INT, got, 1, MPI_INT, ring, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    CHECK(got[0] == 2 * below && got[1] == 2 * above);
    recv[0] = recv[1] = -1;
    MPI_Neighbor_alltoall_c(send, 1, MPI_INT, recv, 1, MPI_INT, ring);
    CHECK(recv[0] == 100 * below + 1 && recv[1] == 100 * above);

    /* MPI_IN_PLACE has no meaning here. */
    MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN);
    int err = MPI_Neighbor_allgather(MPI_IN_PLACE, 1, MPI_INT, got, 1, MPI_INT, ring);
    CHECK(error_class(err) == MPI_ERR_BUFFER);
    MPI_Comm_free(&ring);
}

static void grid(void) {
    /* Not periodic: a rank on an edge has MPI_PROC_NULL beyond it. */
    int dims[2] = {0, 0}, periods[2] = {0, 0};
    MPI_Dims_create(size, 2, dims);
    MPI_Comm grid;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &grid);
    int nb[4];
    MPI_Cart_shift(grid, 0, 1, &nb[0], &nb[1]);
    MPI_Cart_shift(grid, 1, 1, &nb[2], &nb[3]);

    /* allgatherv: two ints from each neighbour, placed in reverse. */
    int mine[2] = {rank, -rank}, got[8], counts[4] = {2, 2, 2, 2}, displs[4] = {6, 4, 2, 0};
    for (int i = 0; i < 8; i++) got[i] = -99;
    MPI_Neighbor_allgatherv(mine, 2, MPI_INT, got, counts, displs, MPI_INT, grid);
    for (int j = 0; j < 4; j++) {
        int *at = got + displs[j];
        if (nb[j] == MPI_PROC_NULL)
            CHECK(at[0] == -99 && at[1] == -99);
        else
            CHECK(at[0] == nb[j] && at[1] == -nb[j]);
    }

    /* alltoallv, non-blocking: d + 1 ints along dimension d, each the
     * sender's rank and the place it sent from. The block from below
     * (place 2d) is the one its sender sent up (place 2d + 1). */
    int out[6], in[6], sc[4] = {1, 1, 2, 2}, sd[4] = {0, 1, 2, 4}, rd[4] = {0, 1, 2, 4};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < sc[i]; k++) out[sd[i] + k] = 10 * rank + i;
    for (int i = 0; i < 6; i++) in[i] = -1;
    MPI_Request req;
    MPI_Ineighbor_alltoallv(out, sc, sd, MPI_INT, in, sc, rd, MPI_INT, grid, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < sc[j]; k++)
            CHECK(in[rd[j] + k] == (nb[j] == MPI_PROC_NULL ? -1 : 10 * nb[j] + (j ^ 1)));
    MPI_Comm_free(&grid);
}

static void graph(void) {
    /* A ring as a graph: each node's neighbours are the next and the
     * previous. An edge listed twice (on 1 and 2 ranks) pairs its
     * blocks first sent, first received. */
    int index[64], edges[128];
    for (int i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + 1) % size;
        edges[2 * i + 1] = (i + size - 1) % size;
    }
    MPI_Comm g;
    MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &g);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int send[2] = {10 * rank, 10 * rank + 1}, recv[2] = {-1, -1};
    MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, g);
    if (size > 2)
        CHECK(recv[0] == 10 * next + 1 && recv[1] == 10 * prev);
    else
        CHECK(recv[0] == 10 * next && recv[1] == 10 * next + 1);
    MPI_Comm_free(&g);
}

static void dist(void) {
    /* Edges to the next rank and the one after; a type per block: one
     * int one step on, two doubles two steps on. */
    int dst[2] = {(rank + 1) % size, (rank + 2) % size};
    int src[2] = {(rank + size - 1) % size, (rank + 2 * size - 2) % size};
    MPI_Comm d;
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, src, MPI_UNWEIGHTED, 2, dst,
                                   MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &d);
    struct {
        int one;
        double two[2];
    } out, in;
    int counts[2] = {1, 2};
    MPI_Aint displs[2] = {(char *)&out.one - (char *)&out, (char *)out.two - (char *)&out};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Request req;
    MPI_Neighbor_alltoallw_init(&out, counts, displs, types, &in, counts, displs, types, d,
                                MPI_INFO_NULL, &req);
    for (int round = 0; round < 3; round++) {
        out.one = rank + round;
        out.two[0] = rank + 0.5 + round;
        out.two[1] = rank + 0.25;
        in.one = -1;
        in.two[0] = in.two[1] = -1;
        MPI_Start(&req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        CHECK(in.one == src[0] + round);
        CHECK(in.two[0] == src[1] + 0.5 + round && in.two[1] == src[1] + 0.25);
    }
    MPI_Request_free(&req);
    MPI_Comm_free(&d);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 64);
    ring();
    grid();
    graph();
    dist();

    /* A communicator with no topology has no neighbours. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int x = 0, y[2];
    int err = MPI_Neighbor_allgather(&x, 1, MPI_INT, y, 1, MPI_INT, MPI_COMM_WORLD);
    CHECK(error_class(err) == MPI_ERR_TOPOLOGY);

    MPI_Finalize();
    printf("neighbours ok\n");
    return 0;
}
