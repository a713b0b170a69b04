/* Groups and their algebra (union, intersection, difference, incl, excl
 * and the range forms), communicators made from such groups, and the
 * MPI-4.1 calls around them: the request status family that leaves the
 * requests as they are, MPI_INFO_ENV and MPI_Info_create_env, and
 * MPI_Get_hw_resource_info. Prints "groups ok" on each rank. */
#include <mpi.h>
#include <string.h>

#include "check.h"

static int rank, size;

/* Call `call` until `done` holds, for 10 s at the most: a message that
 * never comes fails the check rather than spinning on. */
#define POLL(call, done)                              \
    do {                                              \
        double until_ = MPI_Wtime() + 10;             \
        do call;                                      \
        while (!(done) && MPI_Wtime() < until_);      \
        CHECK(done);                                  \
    } while (0)

/* The world ranks of group g, in its order, into out: how many. */
static int members(MPI_Group g, MPI_Group world, int *out) {
    int n = -1, in[16];
    MPI_Group_size(g, &n);
    for (int i = 0; i < n; i++) in[i] = i;
    MPI_Group_translate_ranks(g, n, in, world, out);
    return n;
}

/* Whether group g is exactly the world ranks want[0..n), in order. */
static int is(MPI_Group g, MPI_Group world, const int *want, int n) {
    int got[16];
    if (members(g, world, got) != n) return 0;
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

static void algebra(void) {
    MPI_Group world, evens, low, g;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    /* evens: 0, 2, 4, ... by a range; low: the first half, backwards. */
    int r[1][3] = {{0, size - 1, 2}};
    MPI_Group_range_incl(world, 1, r, &evens);
    int ne = (size + 1) / 2, nl = (size + 1) / 2, lowr[16];
    for (int i = 0; i < nl; i++) lowr[i] = nl - 1 - i;
    MPI_Group_incl(world, nl, lowr, &low);
    int e[16];
    for (int i = 0; i < ne; i++) e[i] = 2 * i;
    CHECK(is(evens, world, e, ne));
    CHECK(is(low, world, lowr, nl));

    /* union: low's order, then the evens low lacks, in evens' order. */
    int want[16], n = 0;
    for (int i = 0; i < nl; i++) want[n++] = lowr[i];
    for (int i = 0; i < ne; i++)
        if (e[i] >= nl) want[n++] = e[i];
    MPI_Group_union(low, evens, &g);
    CHECK(is(g, world, want, n));
    MPI_Group_free(&g);
    CHECK(g == MPI_GROUP_NULL);

    /* intersection and difference keep the first group's order. */
    n = 0;
    for (int i = 0; i < nl; i++)
        if (lowr[i] % 2 == 0) want[n++] = lowr[i];
    MPI_Group_intersection(low, evens, &g);
    CHECK(is(g, world, want, n));
    MPI_Group_free(&g);
    n = 0;
    for (int i = 0; i < nl; i++)
        if (lowr[i] % 2 == 1) want[n++] = lowr[i];
    MPI_Group_difference(low, evens, &g);
    CHECK(is(g, world, want, n));
    if (n == 0) CHECK(g == MPI_GROUP_EMPTY);
    if (g != MPI_GROUP_EMPTY) MPI_Group_free(&g);

    /* excl and range_excl: the odds, both ways. */
    n = 0;
    for (int i = 1; i < size; i += 2) want[n++] = i;
    MPI_Group_excl(evens, 0, NULL, &g);
    CHECK(is(g, world, e, ne));
    MPI_Group_free(&g);
    MPI_Group_range_excl(world, 1, r, &g);
    CHECK(is(g, world, want, n));
    if (g != MPI_GROUP_EMPTY) MPI_Group_free(&g);
    int ex[16];
    for (int i = 0; i < ne; i++) ex[i] = e[ne - 1 - i];
    MPI_Group_excl(world, ne, ex, &g);
    CHECK(is(g, world, want, n));
    if (g != MPI_GROUP_EMPTY) MPI_Group_free(&g);

    /* A range that runs down, and one of a single rank. */
    int down[2][3] = {{size - 1, 0, -size}, {0, 0, 1}};
    if (size > 1) {
        MPI_Group_range_incl(world, 2, down, &g);
        int w[2] = {size - 1, 0};
        CHECK(is(g, world, w, 2));
        MPI_Group_free(&g);
    }
    /* Nothing included is MPI_GROUP_EMPTY. */
    MPI_Group_incl(world, 0, NULL, &g);
    CHECK(g == MPI_GROUP_EMPTY);
    int sz = -1, cmp = -1;
    MPI_Group_size(g, &sz);
    CHECK(sz == 0);
    MPI_Group_compare(low, low, &cmp);
    CHECK(cmp == MPI_IDENT);

    /* Refusals: a rank twice, out of range, a stride of 0 or one that
     * runs away from the last rank; nothing is made. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0, twice[2] = {0, 0}, out[1] = {size}, stop[1][3] = {{0, 0, 0}},
        away[1][3] = {{1, 0, 1}};
    g = MPI_GROUP_NULL;
    MPI_Error_class(MPI_Group_incl(world, 2, twice, &g), &cls);
    CHECK(cls == MPI_ERR_RANK && g == MPI_GROUP_NULL);
    MPI_Error_class(MPI_Group_excl(world, 1, out, &g), &cls);
    CHECK(cls == MPI_ERR_RANK && g == MPI_GROUP_NULL);
    MPI_Error_class(MPI_Group_range_incl(world, 1, stop, &g), &cls);
    CHECK(cls == MPI_ERR_ARG && g == MPI_GROUP_NULL);
    if (size > 1) {
        MPI_Error_class(MPI_Group_range_excl(world, 1, away, &g), &cls);
        CHECK(cls == MPI_ERR_ARG && g == MPI_GROUP_NULL);
    }
    MPI_Error_class(MPI_Group_union(world, (MPI_Group)0x7ff0, &g), &cls);
    CHECK(cls == MPI_ERR_GROUP && g == MPI_GROUP_NULL);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    /* A communicator of the low half, backwards: rank i of it is world
     * rank nl - 1 - i; the others get MPI_COMM_NULL. */
    MPI_Comm c;
    MPI_Comm_create(MPI_COMM_WORLD, low, &c);
    if (rank < nl) {
        int cr = -1, cs = -1, v = rank, sum = 0;
        MPI_Comm_rank(c, &cr);
        MPI_Comm_size(c, &cs);
        CHECK(cr == nl - 1 - rank && cs == nl);
        MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, c);
        CHECK(sum == nl * (nl - 1) / 2);
        MPI_Comm_free(&c);
    } else {
        CHECK(c == MPI_COMM_NULL);
    }
    MPI_Group_free(&low);
    MPI_Group_free(&evens);
    MPI_Group_free(&world);
}

static void request_status(void) {
    /* A receive from self, not yet sent to, then sent: the get_status
     * calls see it complete and leave it for MPI_Wait. */
    int a = -1, b = -1, x = 41, y = 42, flag = -1, index = -1, outcount = -1, idx[2];
    MPI_Request r[2];
    MPI_Status st, sts[2];
    MPI_Irecv(&a, 1, MPI_INT, rank, 1, MPI_COMM_WORLD, &r[0]);
    MPI_Irecv(&b, 1, MPI_INT, rank, 2, MPI_COMM_WORLD, &r[1]);
    MPI_Request_get_status_all(2, r, &flag, MPI_STATUSES_IGNORE);
    CHECK(flag == 0);
    MPI_Request_get_status_some(2, r, &outcount, idx, sts);
    CHECK(outcount == 0);
    MPI_Send(&y, 1, MPI_INT, rank, 2, MPI_COMM_WORLD);
    /* Only the second is complete: seen, its status filled, kept. */
    POLL(MPI_Request_get_status_any(2, r, &index, &flag, &st), flag);
    CHECK(index == 1 && st.MPI_SOURCE == rank && st.MPI_TAG == 2);
    CHECK(r[1] != MPI_REQUEST_NULL);
    MPI_Send(&x, 1, MPI_INT, rank, 1, MPI_COMM_WORLD);
    POLL(MPI_Request_get_status_all(2, r, &flag, sts), flag);
    CHECK(sts[0].MPI_TAG == 1 && sts[1].MPI_TAG == 2);
    MPI_Request_get_status_some(2, r, &outcount, idx, sts);
    CHECK(outcount == 2 && idx[0] == 0 && idx[1] == 1);
    CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    CHECK(a == 41 && b == 42 && r[0] == MPI_REQUEST_NULL);
    /* A persistent receive's status, while it is active and complete. */
    MPI_Request pr;
    int c = -1;
    MPI_Recv_init(&c, 1, MPI_INT, rank, 9, MPI_COMM_WORLD, &pr);
    MPI_Start(&pr);
    MPI_Send(&x, 1, MPI_INT, rank, 9, MPI_COMM_WORLD);
    POLL(MPI_Request_get_status_all(1, &pr, &flag, &st), flag);
    CHECK(st.MPI_TAG == 9 && st.MPI_SOURCE == rank && pr != MPI_REQUEST_NULL);
    MPI_Wait(&pr, MPI_STATUS_IGNORE);
    CHECK(c == 41);
    MPI_Request_free(&pr);
    /* Nothing active: complete, MPI_UNDEFINED. */
    MPI_Request_get_status_any(2, r, &index, &flag, MPI_STATUS_IGNORE);
    CHECK(flag == 1 && index == MPI_UNDEFINED);
    MPI_Request_get_status_some(2, r, &outcount, idx, MPI_STATUSES_IGNORE);
    CHECK(outcount == MPI_UNDEFINED);
}

/* The value of key in info, or "" if absent. */
static const char *value_of(MPI_Info info, const char *key) {
    static char v[1024];
    int len = sizeof v, flag = 0;
    MPI_Info_get_string(info, key, &len, v, &flag);
    return flag ? v : "";
}

static void environment(int argc, char **argv) {
    char want[16];
    snprintf(want, sizeof want, "%d", size);
    CHECK(strcmp(value_of(MPI_INFO_ENV, "maxprocs"), want) == 0);
    CHECK(strcmp(value_of(MPI_INFO_ENV, "command"), argv[0]) == 0);
    CHECK(strcmp(value_of(MPI_INFO_ENV, "thread_level"), "MPI_THREAD_SERIALIZED") == 0);
    CHECK(strlen(value_of(MPI_INFO_ENV, "host")) > 0);
    /* Read as any info object is; changed or freed, it is refused. */
    MPI_Info copy = MPI_INFO_NULL, env = MPI_INFO_ENV, made;
    MPI_Info_dup(MPI_INFO_ENV, &copy);
    CHECK(strcmp(value_of(copy, "maxprocs"), want) == 0);
    MPI_Info_free(&copy);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0;
    MPI_Error_class(MPI_Info_set(MPI_INFO_ENV, "maxprocs", "1"), &cls);
    CHECK(cls == MPI_ERR_INFO);
    MPI_Error_class(MPI_Info_free(&env), &cls);
    CHECK(cls == MPI_ERR_INFO && env == MPI_INFO_ENV);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    CHECK(strcmp(value_of(MPI_INFO_ENV, "maxprocs"), want) == 0);
    /* Made from arguments of the program's choosing. */
    char *args[] = {"solver", "-n", "3", NULL};
    MPI_Info_create_env(3, args, &made);
    CHECK(strcmp(value_of(made, "command"), "solver") == 0);
    CHECK(strcmp(value_of(made, "argv"), "-n 3") == 0);
    MPI_Info_free(&made);
    (void)argc;
    /* The hardware: a host and how many processors. */
    MPI_Get_hw_resource_info(&made);
    CHECK(atoi(value_of(made, "meshwork_cpus")) >= 1);
    CHECK(strcmp(value_of(made, "host"), value_of(MPI_INFO_ENV, "host")) == 0);
    MPI_Info_free(&made);
}

int main(int argc, char **argv) {
    int provided = -1;
    /* Between two levels: the next one up. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED + 1, &provided);
    CHECK(provided == MPI_THREAD_SERIALIZED);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 16);
    algebra();
    request_status();
    environment(argc, argv);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("groups ok on rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
