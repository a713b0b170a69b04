/* A rank killed in the middle of collectives: rank 1 SIGKILLs itself
 * after some all-reduces; every other rank, whose error handler is
 * MPI_ERRORS_RETURN, gets an error from its next call within the deadline,
 * prints its class and meshwork's text ("failed: ... rank 1 ...") and
 * waits to be killed. With the argument "recv", rank 1 dies before it sends and the
 * others wait for its message in MPI_Recv instead. Run by
 * mpi/tests/mpi_programs.rs under meshrun --keep-going. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int report(const char *what, int i, int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int len, cls;
    MPI_Error_class(rc, &cls);
    MPI_Error_string(rc, text, &len);
    printf("failed: %s %d class %d: %s\n", what, i, cls, text);
    fflush(stdout);
    /* A survivor stays up, its links open, until the test has every
     * survivor's report and kills them all: one that left at once would be
     * one more failure for those still reporting. */
    for (;;) pause();
    return 0;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (argc > 1 && strcmp(argv[1], "recv") == 0) {
        if (rank == 1) raise(SIGKILL);
        int v;
        int rc = MPI_Recv(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return report("recv", 0, rc);
        printf("a message from a dead rank\n");
        return 1;
    }
    double x[1024];
    for (int i = 0;; i++) {
        if (rank == 1 && i == 50) raise(SIGKILL);
        for (int j = 0; j < 1024; j++) x[j] = rank;
        int rc = MPI_Allreduce(MPI_IN_PLACE, x, 1024, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return report("call", i, rc);
        if (i > 100000) {
            printf("no error after %d calls\n", i);
            return 1;
        }
    }
}
