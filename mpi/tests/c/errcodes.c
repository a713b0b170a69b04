/* A program's own error handler (MPI_Comm_create_errhandler), called
 * with the communicator and the code of a failed call and by
 * MPI_Comm_call_errhandler; and its own error classes, codes and
 * strings: added above
 * MPI_ERR_LASTCODE, MPI_LASTUSEDCODE following them, MPI_Error_class and
 * MPI_Error_string knowing them, raised through MPI_Comm_call_errhandler
 * to an MPI_ERRORS_RETURN communicator, and MPI-4.1's removals, refused
 * while a class has codes or a code has its string. Prints "errcodes ok"
 * on each rank. */
#include <mpi.h>
#include <string.h>

#include "check.h"

static int rank;

static int seen_code = -1, calls = 0;
static MPI_Comm seen_comm = MPI_COMM_NULL;

static void on_error(MPI_Comm *comm, int *code, ...) {
    seen_comm = *comm;
    seen_code = *code;
    calls++;
}

static void own_handler(void) {
    MPI_Errhandler eh, got;
    CHECK(MPI_Comm_create_errhandler(on_error, &eh) == MPI_SUCCESS);
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, eh);
    MPI_Comm_get_errhandler(c, &got);
    CHECK(got == eh);
    MPI_Errhandler_free(&eh);
    /* A send to a rank past the end: the handler, then the code. */
    int x = 0, cls = -1;
    int err = MPI_Send(&x, 1, MPI_INT, 1000, 0, c);
    CHECK(calls == 1 && seen_comm == c && seen_code == err);
    MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_RANK);
    /* Called by the program with a code of its own: that code. */
    int mine = -1;
    MPI_Add_error_code(MPI_ERR_OTHER, &mine);
    CHECK(MPI_Comm_call_errhandler(c, mine) == MPI_SUCCESS);
    CHECK(calls == 2 && seen_code == mine);
    MPI_Remove_error_code(mine);
    MPI_Comm_free(&c);
}

static int last_used(void) {
    int *v = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &v, &flag);
    CHECK(flag && v);
    return *v;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(last_used() == MPI_ERR_LASTCODE);
    own_handler();

    int cls = -1, code = -1, got = -1, len = 0;
    char text[MPI_MAX_ERROR_STRING];
    CHECK(MPI_Add_error_class(&cls) == MPI_SUCCESS && cls > MPI_ERR_LASTCODE);
    CHECK(last_used() == cls);
    MPI_Error_class(cls, &got);
    CHECK(got == cls);
    MPI_Error_string(cls, text, &len);
    CHECK(len == 0 && text[0] == 0);
    MPI_Add_error_string(cls, "the solver diverged");
    MPI_Error_string(cls, text, &len);
    CHECK(strcmp(text, "the solver diverged") == 0 && len == (int)strlen(text));

    CHECK(MPI_Add_error_code(cls, &code) == MPI_SUCCESS && code > cls);
    CHECK(last_used() == code);
    MPI_Add_error_string(code, "residual above 1e6");
    MPI_Error_class(code, &got);
    CHECK(got == cls);
    MPI_Error_string(code, text, &len);
    CHECK(strcmp(text, "residual above 1e6") == 0);
    /* A code of one of MPI's classes. */
    int other = -1;
    CHECK(MPI_Add_error_code(MPI_ERR_OTHER, &other) == MPI_SUCCESS);
    MPI_Error_class(other, &got);
    CHECK(got == MPI_ERR_OTHER);

    /* Through the error handler: the call returns an error of the class. */
    int err = MPI_Comm_call_errhandler(MPI_COMM_WORLD, code);
    CHECK(err == MPI_SUCCESS);

    /* Refusals: not a class; a string on one of MPI's codes; removing
     * what still has codes or a string; removing twice. */
    int c2 = -1, ec = -1;
    MPI_Error_class(MPI_Add_error_code(code, &c2), &ec);
    CHECK(ec == MPI_ERR_ARG);
    MPI_Error_class(MPI_Add_error_string(MPI_ERR_TRUNCATE, "mine"), &ec);
    CHECK(ec == MPI_ERR_ARG);
    MPI_Error_class(MPI_Remove_error_class(cls), &ec);
    CHECK(ec == MPI_ERR_ARG);
    MPI_Error_class(MPI_Remove_error_code(code), &ec);
    CHECK(ec == MPI_ERR_ARG);
    CHECK(MPI_Remove_error_string(code) == MPI_SUCCESS);
    MPI_Error_string(code, text, &len);
    CHECK(len == 0);
    CHECK(MPI_Remove_error_code(code) == MPI_SUCCESS);
    MPI_Error_class(MPI_Remove_error_code(code), &ec);
    CHECK(ec == MPI_ERR_ARG);
    CHECK(MPI_Remove_error_string(cls) == MPI_SUCCESS);
    CHECK(MPI_Remove_error_class(cls) == MPI_SUCCESS);
    CHECK(MPI_Remove_error_code(other) == MPI_SUCCESS);
    CHECK(last_used() == MPI_ERR_LASTCODE);
    MPI_Error_class(MPI_Remove_error_class(MPI_ERR_OTHER), &ec);
    CHECK(ec == MPI_ERR_ARG);

    MPI_Finalize();
    printf("errcodes ok\n");
    return 0;
}
