/* What the OSU benchmarks do not reach: matching with wildcards, probes,
 * derived types (strides and displacements in elements and in bytes,
 * resized extents), communicators, in-place and uneven collectives,
 * non-blocking collectives, and errors returned through MPI_ERRORS_RETURN.
 * Run by mpi/tests/mpi_programs.rs under meshrun; prints "semantics ok"
 * on every rank, or the first check that failed and exits 1. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int rank, size;

/* Address arithmetic on full 64-bit addresses, and handles as ints and
 * back (declared in mpi.h: called undeclared, C would cut them to int). */
static void conversions(void) {
    static char far[64];
    MPI_Aint base = 0;
    MPI_Get_address(far, &base);
    CHECK(base == (MPI_Aint)far);
    CHECK(MPI_Aint_add(base, 40) == (MPI_Aint)(far + 40));
    CHECK(MPI_Aint_diff(MPI_Aint_add(base, 40), base) == 40);
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(MPI_COMM_WORLD)) == MPI_COMM_WORLD);
    CHECK(MPI_Type_fromint(MPI_Type_toint(MPI_DOUBLE)) == MPI_DOUBLE);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(dup)) == dup);
    MPI_Comm_free(&dup);
}

static void matching(void) {
    /* Every rank sends two tagged messages to rank 0; rank 0 takes them by
     * tag first, then by ANY_SOURCE/ANY_TAG, and messages of one sender
     * and tag arrive in order. */
    if (rank != 0) {
        int a = rank * 10, b = rank * 10 + 1;
        MPI_Send(&a, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
        MPI_Send(&b, 1, MPI_INT, 0, 8, MPI_COMM_WORLD);
    } else {
        for (int i = 1; i < size; i++) {
            int v = -1;
            MPI_Status st;
            /* tag 8 first: the tag 7 message waits, unexpected. */
            MPI_Recv(&v, 1, MPI_INT, i, 8, MPI_COMM_WORLD, &st);
            CHECK(v == i * 10 + 1 && st.MPI_SOURCE == i && st.MPI_TAG == 8);
        }
        int seen = 0;
        for (int i = 1; i < size; i++) {
            int v = -1, count = -1;
            MPI_Status st;
            MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(count == 1 && st.MPI_TAG == 7);
            MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            CHECK(v == st.MPI_SOURCE * 10);
            seen |= 1 << st.MPI_SOURCE;
        }
        CHECK(seen == ((1 << size) - 2));
    }
    /* Nothing of the next exchange reaches rank 0 before it took these. */
    MPI_Barrier(MPI_COMM_WORLD);
    /* Posted receives match in the order posted. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int got[3] = {-1, -1, -1}, out[3] = {rank, rank + 100, rank + 200};
    MPI_Request r[6];
    for (int i = 0; i < 3; i++)
        MPI_Irecv(&got[i], 1, MPI_INT, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, &r[i]);
    for (int i = 0; i < 3; i++)
        MPI_Isend(&out[i], 1, MPI_INT, next, 5, MPI_COMM_WORLD, &r[3 + i]);
    MPI_Waitall(6, r, MPI_STATUSES_IGNORE);
    CHECK(got[0] == prev && got[1] == prev + 100 && got[2] == prev + 200);
    /* Sendrecv around the ring; a message to oneself. */
    int in = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, next, 9, &in, 1, MPI_INT, prev, 9, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    CHECK(in == prev);
    MPI_Request self;
    int mine = 42, back = 0;
    MPI_Isend(&mine, 1, MPI_INT, rank, 3, MPI_COMM_WORLD, &self);
    MPI_Recv(&back, 1, MPI_INT, rank, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&self, MPI_STATUS_IGNORE);
    CHECK(back == 42);
    int flag = 1;
    MPI_Iprobe(MPI_ANY_SOURCE, 1234, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    CHECK(flag == 0);
    MPI_Status none;
    MPI_Recv(&back, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &none);
    CHECK(none.MPI_SOURCE == MPI_PROC_NULL && none.MPI_TAG == MPI_ANY_TAG);
}

static void datatypes(void) {
    /* A column of a 4x4 matrix, sent as a vector and received packed. */
    double m[16], col[4];
    for (int i = 0; i < 16; i++) m[i] = rank * 100 + i;
    MPI_Datatype column;
    MPI_Type_vector(4, 1, 4, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);
    int sz = 0;
    MPI_Type_size(column, &sz);
    CHECK(sz == 32);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Sendrecv(&m[1], 1, column, next, 11, col, 4, MPI_DOUBLE, prev, 11, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    for (int i = 0; i < 4; i++) CHECK(col[i] == prev * 100 + 1 + 4 * i);
    /* Broadcast into the column of every rank. */
    MPI_Bcast(&m[2], 1, column, 0, MPI_COMM_WORLD);
    for (int i = 0; i < 4; i++) CHECK(m[2 + 4 * i] == 2 + 4 * i);
    MPI_Type_free(&column);
    CHECK(column == MPI_DATATYPE_NULL);
    char name[MPI_MAX_OBJECT_NAME];
    int len = 0;
    MPI_Type_get_name(MPI_DOUBLE, name, &len);
    CHECK(strcmp(name, "MPI_DOUBLE") == 0 && len == 10);
}

static void byte_types(void) {
    /* Displacements and strides in bytes, resized extents, duplicates. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    struct P {
        double x;
        int id;
    } ps[5];
    for (int i = 0; i < 5; i++) {
        ps[i].x = rank * 10 + i;
        ps[i].id = -1;
    }
    /* The x of every struct: a double stretched to the struct's size. */
    MPI_Datatype xs, column, column2, holes, pair;
    CHECK(MPI_Type_create_resized(MPI_DOUBLE, 0, sizeof(struct P), &xs) == MPI_SUCCESS);
    MPI_Type_commit(&xs);
    MPI_Aint lb = -1, extent = -1, true_lb = -1, true_extent = -1;
    MPI_Type_get_extent(xs, &lb, &extent);
    MPI_Type_get_true_extent(xs, &true_lb, &true_extent);
    CHECK(lb == 0 && extent == sizeof(struct P) && true_lb == 0 && true_extent == 8);
    double got[5];
    MPI_Sendrecv(ps, 5, xs, next, 12, got, 5, MPI_DOUBLE, prev, 12, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    for (int i = 0; i < 5; i++) CHECK(got[i] == prev * 10 + i);

    /* A column of a 4x4 matrix by its byte stride, and its duplicate. */
    double m[16], col[4];
    for (int i = 0; i < 16; i++) m[i] = rank * 100 + i;
    CHECK(MPI_Type_create_hvector(4, 1, 4 * sizeof(double), MPI_DOUBLE, &column) == MPI_SUCCESS);
    CHECK(MPI_Type_dup(column, &column2) == MPI_SUCCESS);
    MPI_Type_commit(&column2);
    int sz = 0;
    MPI_Type_size(column2, &sz);
    CHECK(sz == 32);
    MPI_Sendrecv(&m[3], 1, column2, next, 13, col, 4, MPI_DOUBLE, prev, 13, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    for (int i = 0; i < 4; i++) CHECK(col[i] == prev * 100 + 3 + 4 * i);

    /* Ints 0, 6 and 7 by byte displacements; ints 1 and 5 by one length. */
    int v[8], w[3];
    for (int i = 0; i < 8; i++) v[i] = rank * 1000 + i;
    int lens[2] = {1, 2};
    MPI_Aint displs[2] = {0, 6 * sizeof(int)}, two[2] = {sizeof(int), 5 * sizeof(int)};
    CHECK(MPI_Type_create_hindexed(2, lens, displs, MPI_INT, &holes) == MPI_SUCCESS);
    CHECK(MPI_Type_create_hindexed_block(2, 1, two, MPI_INT, &pair) == MPI_SUCCESS);
    MPI_Type_commit(&holes);
    MPI_Type_commit(&pair);
    MPI_Type_get_true_extent(holes, &true_lb, &true_extent);
    CHECK(true_lb == 0 && true_extent == 8 * sizeof(int));
    MPI_Sendrecv(v, 1, holes, next, 14, w, 3, MPI_INT, prev, 14, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    CHECK(w[0] == prev * 1000 && w[1] == prev * 1000 + 6 && w[2] == prev * 1000 + 7);
    MPI_Sendrecv(v, 1, pair, next, 15, w, 2, MPI_INT, prev, 15, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    CHECK(w[0] == prev * 1000 + 1 && w[1] == prev * 1000 + 5);
    MPI_Type_free(&xs);
    MPI_Type_free(&column);
    MPI_Type_free(&column2);
    MPI_Type_free(&holes);
    MPI_Type_free(&pair);
}

static void collectives(void) {
    /* In place, uneven reduce_scatter, scans, v forms, non-blocking. */
    int x[4];
    for (int i = 0; i < 4; i++) x[i] = rank + i;
    MPI_Allreduce(MPI_IN_PLACE, x, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 4; i++) CHECK(x[i] == size * (size - 1) / 2 + size * i);
    long s = rank + 1, pre = 0;
    MPI_Scan(&s, &pre, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(pre == (long)(rank + 1) * (rank + 2) / 2);
    MPI_Exscan(&s, &pre, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank > 0) CHECK(pre == (long)rank * (rank + 1) / 2);
    /* Rank r gets r+1 elements of the sum. */
    int counts[16], total = 0;
    for (int i = 0; i < size; i++) total += counts[i] = i + 1;
    float *in = malloc(sizeof(float) * total), out[16];
    for (int i = 0; i < total; i++) in[i] = (float)i;
    MPI_Reduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int before = rank * (rank + 1) / 2;
    for (int i = 0; i <= rank; i++) CHECK(out[i] == (float)(size * (before + i)));
    /* Allgatherv: rank r contributes r+1 copies of r. */
    int mine[16], all[256], displs[16];
    for (int i = 0; i <= rank; i++) mine[i] = rank;
    for (int i = 0, d = 0; i < size; d += counts[i], i++) displs[i] = d;
    MPI_Allgatherv(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0, k = 0; i < size; i++)
        for (int j = 0; j <= i; j++) CHECK(all[k++] == i);
    /* Gather in place at the root. */
    int g[16];
    g[rank] = rank * 3;
    if (rank == 0)
        MPI_Gather(MPI_IN_PLACE, 1, MPI_INT, g, 1, MPI_INT, 0, MPI_COMM_WORLD);
    else
        MPI_Gather(&g[rank], 1, MPI_INT, NULL, 0, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int i = 0; i < size; i++) CHECK(g[i] == i * 3);
    /* Non-blocking all-reduce overlapping a ring exchange. */
    double d = rank, dsum = 0;
    MPI_Request req;
    MPI_Iallreduce(&d, &dsum, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, in2 = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, next, 21, &in2, 1, MPI_INT, prev, 21, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    CHECK(dsum == size - 1 && in2 == prev && req == MPI_REQUEST_NULL);
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    int done = 0;
    while (!done) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    free(in);
}

static void communicators(void) {
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    int hr, hs;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    CHECK(hs == (size + 1 - rank % 2) / 2);
    /* Keys in reverse: the highest world rank is rank 0 of its half. */
    int top = rank;
    MPI_Bcast(&top, 1, MPI_INT, 0, half);
    CHECK(top == (rank % 2 == 0 ? (size - 1) - ((size - 1) % 2) : size - 1 - (size % 2)));
    (void)hr;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int cmp = 0;
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &cmp);
    CHECK(cmp == MPI_CONGRUENT);
    MPI_Comm_set_name(dup, "dup");
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    MPI_Comm_get_name(dup, name, &len);
    CHECK(strcmp(name, "dup") == 0);
    /* Messages on the duplicate never meet those of the world. */
    int a = 1, b = 2, got = 0;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Request r[2];
    MPI_Isend(&a, 1, MPI_INT, next, 0, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&b, 1, MPI_INT, next, 0, dup, &r[1]);
    MPI_Recv(&got, 1, MPI_INT, prev, 0, dup, MPI_STATUS_IGNORE);
    CHECK(got == 2);
    MPI_Recv(&got, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(got == 1);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    MPI_Comm none;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : MPI_UNDEFINED, 0, &none);
    CHECK((rank == 0) == (none != MPI_COMM_NULL));
    if (none != MPI_COMM_NULL) MPI_Comm_free(&none);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    CHECK(half == MPI_COMM_NULL);
}

static int copies = 0, deletes = 0;

static int copy_attr(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag) {
    (void)c; (void)k; (void)extra;
    copies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_attr(MPI_Comm c, int k, void *value, void *extra) {
    (void)c; (void)k; (void)value; (void)extra;
    deletes++;
    return MPI_SUCCESS;
}

static void *send_to_self(void *arg) {
    (void)arg;
    int v = 4242;
    MPI_Send(&v, 1, MPI_INT, rank, 90, MPI_COMM_WORLD);
    return NULL;
}

static void more(void) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    /* Persistent requests, started twice; an inactive one is passed over. */
    int out = rank, in = -1;
    MPI_Request r[2];
    MPI_Send_init(&out, 1, MPI_INT, next, 30, MPI_COMM_WORLD, &r[0]);
    MPI_Recv_init(&in, 1, MPI_INT, prev, 30, MPI_COMM_WORLD, &r[1]);
    for (int round = 0; round < 2; round++) {
        out = rank + 10 * round;
        MPI_Startall(2, r);
        int i1, i2, i3;
        MPI_Waitany(2, r, &i1, MPI_STATUS_IGNORE);
        MPI_Waitany(2, r, &i2, MPI_STATUS_IGNORE);
        MPI_Waitany(2, r, &i3, MPI_STATUS_IGNORE);
        CHECK(i1 != i2 && i3 == MPI_UNDEFINED && r[0] != MPI_REQUEST_NULL);
        CHECK(in == prev + 10 * round);
    }
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);
    CHECK(r[0] == MPI_REQUEST_NULL);
    /* A wait on a receive from this rank while another thread sends it
     * the message (MPI_THREAD_MULTIPLE). */
    int mine = -1;
    MPI_Request rq;
    MPI_Irecv(&mine, 1, MPI_INT, rank, 90, MPI_COMM_WORLD, &rq);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, send_to_self, NULL) == 0);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    pthread_join(t, NULL);
    CHECK(mine == 4242);
    /* One Waitall over more requests than it takes at once: receives
     * posted in the reverse of their sends' order, sends, and null
     * requests between them, each with its status. */
    enum { N = 40 };
    int outs[N], ins[N];
    MPI_Request many[3 * N];
    MPI_Status sts[3 * N];
    for (int i = 0; i < N; i++) {
        ins[i] = -1;
        MPI_Irecv(&ins[i], 1, MPI_INT, prev, 100 + N - 1 - i, MPI_COMM_WORLD, &many[3 * i]);
        many[3 * i + 2] = MPI_REQUEST_NULL;
    }
    for (int i = 0; i < N; i++) {
        outs[i] = rank * 1000 + i;
        MPI_Isend(&outs[i], 1, MPI_INT, next, 100 + i, MPI_COMM_WORLD, &many[3 * i + 1]);
    }
    MPI_Waitall(3 * N, many, sts);
    for (int i = 0; i < N; i++) {
        CHECK(ins[i] == prev * 1000 + N - 1 - i);
        CHECK(sts[3 * i].MPI_SOURCE == prev && sts[3 * i].MPI_TAG == 100 + N - 1 - i);
        /* MPI's empty status. */
        CHECK(sts[3 * i + 2].MPI_SOURCE == MPI_ANY_SOURCE && sts[3 * i + 2].MPI_TAG == MPI_ANY_TAG);
        CHECK(many[3 * i] == MPI_REQUEST_NULL && many[3 * i + 1] == MPI_REQUEST_NULL);
    }
    /* A matched probe takes the message for its receive alone. */
    int v = rank * 7, got = -1, count = -1;
    MPI_Request s;
    MPI_Isend(&v, 1, MPI_INT, next, 31, MPI_COMM_WORLD, &s);
    MPI_Message msg;
    MPI_Status st;
    MPI_Mprobe(MPI_ANY_SOURCE, 31, MPI_COMM_WORLD, &msg, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 1 && st.MPI_SOURCE == prev);
    MPI_Mrecv(&got, 1, MPI_INT, &msg, MPI_STATUS_IGNORE);
    CHECK(got == prev * 7 && msg == MPI_MESSAGE_NULL);
    MPI_Wait(&s, MPI_STATUS_IGNORE);
    /* Isendrecv and Waitsome. */
    MPI_Request q[2];
    int a = rank, b = -1, c = -1, outcount = 0, idx[2];
    MPI_Isendrecv(&a, 1, MPI_INT, next, 32, &b, 1, MPI_INT, prev, 32, MPI_COMM_WORLD, &q[0]);
    MPI_Irecv(&c, 1, MPI_INT, prev, 33, MPI_COMM_WORLD, &q[1]);
    MPI_Send(&a, 1, MPI_INT, next, 33, MPI_COMM_WORLD);
    int done = 0;
    while (done < 2) {
        MPI_Waitsome(2, q, &outcount, idx, MPI_STATUSES_IGNORE);
        CHECK(outcount >= 1);
        done += outcount;
    }
    CHECK(b == prev && c == prev);
    /* Attributes: the tag bound, and a keyval copied on dup and deleted
     * on free. */
    int *ub, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    CHECK(flag && *ub >= 32767);
    int key;
    static int value = 5;
    MPI_Comm_create_keyval(copy_attr, delete_attr, &key, NULL);
    MPI_Comm_set_attr(MPI_COMM_WORLD, key, &value);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int *seen = NULL;
    MPI_Comm_get_attr(dup, key, &seen, &flag);
    CHECK(flag && seen == &value && copies == 1);
    MPI_Comm_free(&dup);
    CHECK(deletes == 1);
    MPI_Comm_delete_attr(MPI_COMM_WORLD, key);
    CHECK(deletes == 2);
    MPI_Comm_free_keyval(&key);
    /* A synchronous send completes only once its receive has it. */
    int sv = rank, sr = -1, sflag = 1;
    MPI_Request ss;
    MPI_Issend(&sv, 1, MPI_INT, next, 34, MPI_COMM_WORLD, &ss);
    MPI_Test(&ss, &sflag, MPI_STATUS_IGNORE);
    CHECK(sflag == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Recv(&sr, 1, MPI_INT, prev, 34, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&ss, MPI_STATUS_IGNORE);
    CHECK(sr == prev);
    /* An indexed type's extent runs from its lowest block. */
    MPI_Datatype ix;
    int one = 1, at = 1;
    MPI_Aint lb, ext;
    MPI_Type_indexed(1, &one, &at, MPI_INT, &ix);
    MPI_Type_get_extent(ix, &lb, &ext);
    CHECK(lb == 4 && ext == 4);
    MPI_Type_free(&ix);
    /* Groups: a split's members in the world. */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Group wg, hg;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Comm_group(half, &hg);
    int hs, zero = 0, in_world = -1;
    MPI_Group_size(hg, &hs);
    MPI_Group_translate_ranks(hg, 1, &zero, wg, &in_world);
    CHECK(in_world == rank % 2);
    MPI_Group_free(&hg);
    MPI_Group_free(&wg);
    MPI_Comm_free(&half);
    CHECK(hg == MPI_GROUP_NULL);
}

static void errors(void) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int v = 0, cls = -1, len = 0;
    char text[MPI_MAX_ERROR_STRING];
    int rc = MPI_Send(&v, 1, MPI_INT, size + 5, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK);
    MPI_Error_string(rc, text, &len);
    CHECK(strstr(text, "MPI_Send") != NULL && len > 0);
    rc = MPI_Bcast(&v, 1, MPI_INT, -7, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ROOT);
    /* A bitwise reduction of floats: an operator the type does not take. */
    float fv = 0, fout = 0;
    rc = MPI_Allreduce(&fv, &fout, 1, MPI_FLOAT, MPI_BAND, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_OP);
    MPI_Win win;
    rc = MPI_Win_create(&v, 4, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_UNSUPPORTED_OPERATION);
    MPI_Error_string(rc, text, &len);
    CHECK(strstr(text, "MPI_Win_create") != NULL);
    /* A message longer than the receive buffer: truncated, named. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int two[2] = {1, 2};
    MPI_Request r;
    MPI_Isend(two, 2, MPI_INT, next, 77, MPI_COMM_WORLD, &r);
    rc = MPI_Recv(&v, 1, MPI_INT, prev, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    /* A request's handle kept after its wait is refused, also once a new
     * request took its place, and the new one is left alone. */
    MPI_Request kept, fresh;
    int a = -1, b = -1;
    MPI_Irecv(&a, 1, MPI_INT, prev, 78, MPI_COMM_WORLD, &r);
    kept = r;
    MPI_Send(&rank, 1, MPI_INT, next, 78, MPI_COMM_WORLD);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    CHECK(a == prev && r == MPI_REQUEST_NULL);
    MPI_Irecv(&b, 1, MPI_INT, prev, 79, MPI_COMM_WORLD, &fresh);
    rc = MPI_Wait(&kept, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_REQUEST);
    MPI_Send(&rank, 1, MPI_INT, next, 79, MPI_COMM_WORLD);
    MPI_Wait(&fresh, MPI_STATUS_IGNORE);
    CHECK(b == prev);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Non-blocking v collectives waited in the reverse of their order,
 * 16-bit reductions, local reductions, indexed blocks, info objects and
 * communicator buffers. */
static void newer(void) {
    /* Rank i gives i + 1 ints to everyone (Iallgatherv) and to rank 0
     * (Igatherv); the second is waited first: the messages of the two
     * must not cross. */
    int mine[16], all[16 * 17 / 2], at0[16 * 17 / 2], counts[16], displs[16];
    for (int i = 0; i <= rank; i++) mine[i] = rank * 100 + i;
    for (int i = 0, d = 0; i < size; d += ++i) counts[i] = i + 1, displs[i] = d;
    MPI_Request r[2];
    MPI_Iallgatherv(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD, &r[0]);
    MPI_Igatherv(mine, rank + 1, MPI_INT, at0, counts, displs, MPI_INT, 0, MPI_COMM_WORLD, &r[1]);
    MPI_Wait(&r[1], MPI_STATUS_IGNORE);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    for (int i = 0, k = 0; i < size; i++)
        for (int j = 0; j <= i; j++, k++) {
            CHECK(all[k] == i * 100 + j);
            if (rank == 0) CHECK(at0[k] == i * 100 + j);
        }
    /* Ialltoallv: rank i sends j + 1 copies of i to rank j. */
    int sc[16], sd[16], rc[16], rd[16], sbuf[16 * 16], rbuf[16 * 16];
    for (int j = 0, d = 0; j < size; d += sc[j], j++) sc[j] = j + 1, sd[j] = d;
    for (int j = 0; j < size; j++) rc[j] = rank + 1, rd[j] = j * (rank + 1);
    for (int j = 0; j < size; j++)
        for (int k = 0; k < sc[j]; k++) sbuf[sd[j] + k] = rank;
    MPI_Ialltoallv(sbuf, sc, sd, MPI_INT, rbuf, rc, rd, MPI_INT, MPI_COMM_WORLD, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    for (int j = 0; j < size; j++)
        for (int k = 0; k <= rank; k++) CHECK(rbuf[rd[j] + k] == j);
    /* Shorts wrap as shorts. */
    short s = 30000, ssum = 0;
    MPI_Allreduce(&s, &ssum, 1, MPI_SHORT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(ssum == (short)(30000 * size));
    /* inout = in op inout, here alone. */
    double in[3] = {1, 5, -2}, io[3] = {4, 2, 0};
    MPI_Reduce_local(in, io, 3, MPI_DOUBLE, MPI_MAX);
    CHECK(io[0] == 4 && io[1] == 5 && io[2] == 0);
    /* Blocks of two at 0 and 3. */
    int at[2] = {0, 3}, src[5] = {1, 2, 3, 4, 5}, dst[4] = {0};
    MPI_Datatype blocks;
    MPI_Type_create_indexed_block(2, 2, at, MPI_INT, &blocks);
    MPI_Type_commit(&blocks);
    MPI_Sendrecv(src, 1, blocks, 0, 5, dst, 4, MPI_INT, 0, 5, MPI_COMM_SELF,
                 MPI_STATUS_IGNORE);
    CHECK(dst[0] == 1 && dst[1] == 2 && dst[2] == 4 && dst[3] == 5);
    MPI_Type_free(&blocks);
    /* Info: set, get (cut to the length asked for), count, delete, dup. */
    MPI_Info info, copy;
    char value[8];
    int len = sizeof value, flag = 0, nkeys = -1;
    MPI_Info_create(&info);
    MPI_Info_set(info, "colour", "blue-green");
    MPI_Info_get_string(info, "colour", &len, value, &flag);
    CHECK(flag && len == 11 && strcmp(value, "blue-gr") == 0);
    MPI_Info_dup(info, &copy);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls = 0;
    MPI_Info_delete(info, "colour");
    MPI_Error_class(MPI_Info_delete(info, "colour"), &cls);
    CHECK(cls == MPI_ERR_INFO_NOKEY);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Info_get_nkeys(info, &nkeys);
    CHECK(nkeys == 0);
    MPI_Info_get_nkeys(copy, &nkeys);
    CHECK(nkeys == 1);
    MPI_Info_free(&info);
    MPI_Info_free(&copy);
    /* A communicator's buffer comes back as it went. */
    static char buffer[1 << 12];
    void *back = NULL;
    int bsize = 0;
    MPI_Comm_attach_buffer(MPI_COMM_WORLD, buffer, sizeof buffer);
    MPI_Comm_flush_buffer(MPI_COMM_WORLD);
    MPI_Comm_detach_buffer(MPI_COMM_WORLD, &back, &bsize);
    CHECK(back == buffer && bsize == sizeof buffer);
}

int main(int argc, char **argv) {
    int provided = -1, flag = 0;
    MPI_Initialized(&flag);
    CHECK(!flag);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    CHECK(provided == MPI_THREAD_MULTIPLE);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 16);
    int version, sub;
    MPI_Get_version(&version, &sub);
    CHECK(version == 5 && sub == 0);
    matching();
    datatypes();
    byte_types();
    collectives();
    communicators();
    more();
    newer();
    conversions();
    errors();
    MPI_Barrier(MPI_COMM_WORLD);
    printf("semantics ok on rank %d of %d\n", rank, size);
    MPI_Finalize();
    MPI_Finalized(&flag);
    CHECK(flag);
    return 0;
}
