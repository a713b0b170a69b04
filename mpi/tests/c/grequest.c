/* Generalized requests: one completed by a thread of the program while
 * the main thread waits in MPI_Wait, whose status is the query
 * function's and whose free function runs once; MPI_Test before and
 * after; MPI_Cancel telling the cancel function whether it completed;
 * MPI_Request_free before completion (the free function runs at
 * MPI_Grequest_complete); a query function's error returned by the
 * wait; MPI_Waitall over a generalized request and a receive. Prints
 * "grequest ok" on each rank. */
#include <mpi.h>
#include <pthread.h>

#include "check.h"

static int rank, size;

struct ctx {
    int frees, cancels, last_complete, fail_query;
};

static int query(void *state, MPI_Status *status) {
    struct ctx *c = state;
    if (c->fail_query) return MPI_ERR_BUFFER;
    MPI_Status_set_source(status, rank);
    MPI_Status_set_tag(status, 42);
    MPI_Status_set_error(status, MPI_SUCCESS);
    return MPI_SUCCESS;
}

static int release(void *state) {
    ((struct ctx *)state)->frees++;
    return MPI_SUCCESS;
}

static int cancel(void *state, int complete) {
    struct ctx *c = state;
    c->cancels++;
    c->last_complete = complete;
    return MPI_SUCCESS;
}

static void *completer(void *arg) {
    MPI_Request *req = arg;
    MPI_Grequest_complete(*req);
    return NULL;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(provided == MPI_THREAD_MULTIPLE);

    /* Completed by another thread while this one waits. */
    struct ctx c = {0};
    MPI_Request req;
    MPI_Grequest_start(query, release, cancel, &c, &req);
    int flag = -1;
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    CHECK(flag == 0 && req != MPI_REQUEST_NULL && c.frees == 0);
    MPI_Cancel(&req);
    CHECK(c.cancels == 1 && c.last_complete == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, completer, &req) == 0);
    MPI_Status st;
    MPI_Wait(&req, &st);
    pthread_join(t, NULL);
    CHECK(req == MPI_REQUEST_NULL && st.MPI_SOURCE == rank && st.MPI_TAG == 42);
    CHECK(c.frees == 1);

    /* Complete first: MPI_Test completes it; a cancel after completion
     * says so. */
    struct ctx d = {0};
    MPI_Grequest_start(query, release, cancel, &d, &req);
    MPI_Grequest_complete(req);
    MPI_Cancel(&req);
    CHECK(d.cancels == 1 && d.last_complete == 1);
    flag = 0;
    MPI_Test(&req, &flag, &st);
    CHECK(flag == 1 && req == MPI_REQUEST_NULL && st.MPI_TAG == 42 && d.frees == 1);

    /* Freed before completion: the free function waits for it. */
    struct ctx e = {0};
    MPI_Request kept;
    MPI_Grequest_start(query, release, cancel, &e, &req);
    kept = req;
    MPI_Request_free(&req);
    CHECK(req == MPI_REQUEST_NULL && e.frees == 0);
    MPI_Grequest_complete(kept);
    CHECK(e.frees == 1);

    /* A query function's error is the wait's. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    struct ctx f = {.fail_query = 1};
    MPI_Grequest_start(query, release, NULL, &f, &req);
    MPI_Grequest_complete(req);
    int err = MPI_Wait(&req, MPI_STATUS_IGNORE), cls = -1;
    MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_BUFFER && f.frees == 1);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    /* Beside a receive in MPI_Waitall. */
    struct ctx g = {0};
    MPI_Request reqs[2];
    int got = -1, next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Irecv(&got, 1, MPI_INT, prev, 5, MPI_COMM_WORLD, &reqs[0]);
    MPI_Grequest_start(query, release, cancel, &g, &reqs[1]);
    CHECK(pthread_create(&t, NULL, completer, &reqs[1]) == 0);
    MPI_Send(&rank, 1, MPI_INT, next, 5, MPI_COMM_WORLD);
    pthread_join(t, NULL);
    MPI_Status sts[2];
    MPI_Waitall(2, reqs, sts);
    CHECK(got == prev && sts[0].MPI_SOURCE == prev && sts[1].MPI_TAG == 42 && g.frees == 1);

    MPI_Finalize();
    printf("grequest ok\n");
    return 0;
}
