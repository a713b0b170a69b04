/* The test programs' check: a condition that does not hold is printed on
 * stderr with the rank and the line, and the program exits 1. Each
 * program has its own `rank`. */
#ifndef MESHWORK_TEST_CHECK_H
#define MESHWORK_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, \
                    __LINE__, #cond);                                       \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#endif
