/* Cartesian topologies as a stencil code uses them (a grid from
 * MPI_Dims_create, coordinates, ranks, neighbours by MPI_Cart_shift and
 * a halo exchange with them, sub-grids), graphs and distributed graphs
 * (a ring each way), and MPI_Pack/MPI_Unpack of a mixed message sent as
 * MPI_PACKED. Prints "topology ok" on each rank. */
#include <mpi.h>
#include <string.h>

#include "check.h"

static int rank, size;

static void grid(void) {
    /* A 2-D grid of every rank, periodic in its first dimension. */
    int dims[2] = {0, 0}, periods[2] = {1, 0}, kind = -1;
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &cart);
    MPI_Topo_test(cart, &kind);
    CHECK(kind == MPI_CART);
    MPI_Topo_test(MPI_COMM_WORLD, &kind);
    CHECK(kind == MPI_UNDEFINED);
    int nd = -1, gd[2], gp[2], me[2], r = -1;
    MPI_Cartdim_get(cart, &nd);
    MPI_Cart_get(cart, 2, gd, gp, me);
    CHECK(nd == 2 && gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 0);
    /* Row-major: the last coordinate runs fastest. */
    CHECK(me[0] == rank / dims[1] && me[1] == rank % dims[1]);
    MPI_Cart_rank(cart, me, &r);
    CHECK(r == rank);
    int other[2];
    MPI_Cart_coords(cart, size - 1, 2, other);
    CHECK(other[0] == dims[0] - 1 && other[1] == dims[1] - 1);
    /* A periodic coordinate wraps. */
    int wrapped[2] = {me[0] + dims[0], me[1]};
    MPI_Cart_rank(cart, wrapped, &r);
    CHECK(r == rank);

    /* Neighbours: periodic along 0, MPI_PROC_NULL past the edges of 1. */
    int up, down, left, right;
    MPI_Cart_shift(cart, 0, 1, &up, &down);
    MPI_Cart_shift(cart, 1, 1, &left, &right);
    CHECK(up == ((me[0] + dims[0] - 1) % dims[0]) * dims[1] + me[1]);
    CHECK(down == ((me[0] + 1) % dims[0]) * dims[1] + me[1]);
    CHECK(left == (me[1] == 0 ? MPI_PROC_NULL : rank - 1));
    CHECK(right == (me[1] == dims[1] - 1 ? MPI_PROC_NULL : rank + 1));

    /* A halo exchange: each sends its rank right and receives its left
     * neighbour's; the left edge gets nothing (MPI_PROC_NULL). */
    int halo = -7;
    MPI_Status st;
    MPI_Sendrecv(&rank, 1, MPI_INT, right, 1, &halo, 1, MPI_INT, left, 1, cart, &st);
    CHECK(halo == (left == MPI_PROC_NULL ? -7 : left));
    if (left == MPI_PROC_NULL) CHECK(st.MPI_SOURCE == MPI_PROC_NULL);
    /* ... and down the periodic dimension: everyone gets one. */
    MPI_Sendrecv(&rank, 1, MPI_INT, down, 2, &halo, 1, MPI_INT, up, 2, cart, MPI_STATUS_IGNORE);
    CHECK(halo == up);

    /* Rows: keep dimension 1. A row's ranks are its columns; a sum over
     * it adds the row's world ranks. */
    int keep[2] = {0, 1}, rr = -1, rs = -1, sum = 0;
    MPI_Comm row;
    MPI_Cart_sub(cart, keep, &row);
    MPI_Comm_rank(row, &rr);
    MPI_Comm_size(row, &rs);
    CHECK(rr == me[1] && rs == dims[1]);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, row);
    CHECK(sum == me[0] * dims[1] * dims[1] + dims[1] * (dims[1] - 1) / 2);
    MPI_Cartdim_get(row, &nd);
    CHECK(nd == 1);
    /* A duplicate keeps the grid. */
    MPI_Comm dup;
    MPI_Comm_dup(cart, &dup);
    MPI_Cart_shift(dup, 0, 1, &r, &kind);
    CHECK(r == up && kind == down);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&row);
    MPI_Comm_free(&cart);

    /* A grid smaller than the world: the rest get MPI_COMM_NULL. */
    int one[1] = {1}, none[1] = {0}, mapped = -1;
    MPI_Cart_create(MPI_COMM_WORLD, 1, one, none, 0, &cart);
    CHECK((rank == 0) == (cart != MPI_COMM_NULL));
    if (cart != MPI_COMM_NULL) MPI_Comm_free(&cart);
    MPI_Cart_map(MPI_COMM_WORLD, 1, one, none, &mapped);
    CHECK(mapped == (rank == 0 ? 0 : MPI_UNDEFINED));

    /* Refusals: a grid larger than the world, a shift on a plain
     * communicator. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0, big[1] = {size + 1};
    MPI_Error_class(MPI_Cart_create(MPI_COMM_WORLD, 1, big, none, 0, &cart), &cls);
    CHECK(cls == MPI_ERR_DIMS);
    MPI_Error_class(MPI_Cart_shift(MPI_COMM_WORLD, 0, 1, &up, &down), &cls);
    CHECK(cls == MPI_ERR_TOPOLOGY);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void graphs(void) {
    /* A ring as a graph: node i's neighbours are i - 1 and i + 1. */
    int index[16], edges[32], kind = -1;
    for (int i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + size - 1) % size;
        edges[2 * i + 1] = (i + 1) % size;
    }
    MPI_Comm g;
    MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &g);
    MPI_Topo_test(g, &kind);
    CHECK(kind == MPI_GRAPH);
    int nn = -1, ne = -1, count = -1, nb[2], gi[16], ge[32];
    MPI_Graphdims_get(g, &nn, &ne);
    CHECK(nn == size && ne == 2 * size);
    MPI_Graph_get(g, 16, 32, gi, ge);
    CHECK(gi[size - 1] == 2 * size && ge[1] == 1 % size);
    MPI_Graph_neighbors_count(g, rank, &count);
    MPI_Graph_neighbors(g, rank, 2, nb);
    CHECK(count == 2 && nb[0] == (rank + size - 1) % size && nb[1] == (rank + 1) % size);
    /* Messages to the neighbours it names. */
    int got = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, nb[1], 6, &got, 1, MPI_INT, nb[0], 6, g, MPI_STATUS_IGNORE);
    CHECK(got == nb[0]);
    MPI_Comm_free(&g);

    /* The same ring as a distributed graph, each rank naming its own
     * edges (weighted by the target), and as adjacency lists. */
    int me[1] = {rank}, deg[1] = {1}, to[1] = {(rank + 1) % size}, w[1] = {to[0] * 10};
    MPI_Comm d;
    MPI_Dist_graph_create(MPI_COMM_WORLD, 1, me, deg, to, w, MPI_INFO_NULL, 0, &d);
    MPI_Topo_test(d, &kind);
    CHECK(kind == MPI_DIST_GRAPH);
    int in = -1, out = -1, weighted = -1, src[1], sw[1], dst[1], dw[1];
    MPI_Dist_graph_neighbors_count(d, &in, &out, &weighted);
    CHECK(in == 1 && out == 1 && weighted == 1);
    MPI_Dist_graph_neighbors(d, 1, src, sw, 1, dst, dw);
    CHECK(src[0] == (rank + size - 1) % size && sw[0] == rank * 10);
    CHECK(dst[0] == (rank + 1) % size && dw[0] == dst[0] * 10);
    MPI_Comm_free(&d);
    int from[1] = {(rank + size - 1) % size};
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, from, MPI_UNWEIGHTED, 1, to,
                                   MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &d);
    MPI_Dist_graph_neighbors_count(d, &in, &out, &weighted);
    CHECK(in == 1 && out == 1 && weighted == 0);
    MPI_Dist_graph_neighbors(d, 1, src, MPI_UNWEIGHTED, 1, dst, MPI_UNWEIGHTED);
    CHECK(src[0] == from[0] && dst[0] == to[0]);
    MPI_Comm_free(&d);

    /* An edge to no node, and a graph query on a grid: refused. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0, one[1] = {1}, bad[1] = {size};
    MPI_Error_class(MPI_Graph_create(MPI_COMM_WORLD, 1, one, bad, 0, &g), &cls);
    CHECK(cls == MPI_ERR_TOPOLOGY);
    MPI_Error_class(MPI_Graphdims_get(MPI_COMM_WORLD, &nn, &ne), &cls);
    CHECK(cls == MPI_ERR_TOPOLOGY);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void packing(void) {
    /* An int, a column of doubles (a vector type) and a string, packed
     * into one buffer and sent to the next rank as MPI_PACKED. */
    double m[12];
    for (int i = 0; i < 12; i++) m[i] = rank * 100 + i;
    MPI_Datatype column;
    MPI_Type_vector(4, 1, 3, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);
    char buf[256], text[6] = "halo!";
    int n = 3, pos = 0, need = 0, a = 0, b = 0, c = 0;
    MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &a);
    MPI_Pack_size(1, column, MPI_COMM_WORLD, &b);
    MPI_Pack_size(6, MPI_CHAR, MPI_COMM_WORLD, &c);
    need = a + b + c;
    CHECK(a == 4 && b == 32 && c == 6);
    MPI_Pack(&n, 1, MPI_INT, buf, sizeof buf, &pos, MPI_COMM_WORLD);
    MPI_Pack(m, 1, column, buf, sizeof buf, &pos, MPI_COMM_WORLD);
    MPI_Pack(text, 6, MPI_CHAR, buf, sizeof buf, &pos, MPI_COMM_WORLD);
    CHECK(pos == need);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, got = -1;
    char in[256];
    MPI_Status st;
    MPI_Sendrecv(buf, pos, MPI_PACKED, next, 5, in, sizeof in, MPI_PACKED, prev, 5,
                 MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_PACKED, &got);
    CHECK(got == need);
    /* Unpacked into a column of another matrix, whose other entries stay. */
    double back[12];
    char said[6] = {0};
    for (int i = 0; i < 12; i++) back[i] = -1;
    pos = 0;
    MPI_Unpack(in, got, &pos, &n, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Unpack(in, got, &pos, back, 1, column, MPI_COMM_WORLD);
    MPI_Unpack(in, got, &pos, said, 6, MPI_CHAR, MPI_COMM_WORLD);
    CHECK(n == 3 && pos == need && strcmp(said, "halo!") == 0);
    for (int i = 0; i < 12; i++) CHECK(back[i] == (i % 3 == 0 ? prev * 100 + i : -1));
    /* The _c forms, and the refusals: no room, and reading past the end. */
    MPI_Count cpos = 0, csize = 0;
    MPI_Pack_size_c(2, column, MPI_COMM_WORLD, &csize);
    CHECK(csize == 64);
    MPI_Pack_c(m, 2, MPI_DOUBLE, buf, 16, &cpos, MPI_COMM_WORLD);
    CHECK(cpos == 16);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0;
    pos = 250;
    MPI_Error_class(MPI_Pack(&n, 2, MPI_INT, buf, sizeof buf, &pos, MPI_COMM_WORLD), &cls);
    CHECK(cls == MPI_ERR_TRUNCATE && pos == 250);
    pos = 0;
    MPI_Error_class(MPI_Unpack(in, 4, &pos, back, 1, column, MPI_COMM_WORLD), &cls);
    CHECK(cls == MPI_ERR_TRUNCATE && pos == 0);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Type_free(&column);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    grid();
    graphs();
    packing();
    MPI_Barrier(MPI_COMM_WORLD);
    printf("topology ok on rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
