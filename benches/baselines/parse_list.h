/* Shared by the Open MPI baselines: a comma-separated list of integers. */
#ifndef MESHWORK_PARSE_LIST_H
#define MESHWORK_PARSE_LIST_H
#include <stdlib.h>
#include <string.h>

/* Parse up to `max` integers from "a,b,c" into `out`; returns how many. */
static int parse(const char *s, long *out, int max) {
    int n = 0;
    char *copy = strdup(s), *tok = strtok(copy, ",");
    while (tok && n < max) { out[n++] = atol(tok); tok = strtok(NULL, ","); }
    free(copy);
    return n;
}
#endif
