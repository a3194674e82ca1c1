/* Uncontended acquire+release pairs through the C API (the reference figure
 * for bench/lua/run.sh). Usage: c_pairs <url> <pairs>. Prints "<pairs> <ms>".
 * With "-" for <pairs>: one slice per line read from stdin (a count of
 * pairs), each answered "<pairs> <ms>" on one line, on the same client and
 * lock, so that a driver can alternate short slices with other loops. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hilock.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <url> <pairs>\n", argv[0]);
        return 2;
    }
    long n = strcmp(argv[2], "-") == 0 ? 0 : atol(argv[2]);
    char err[256] = "";
    hilock_client *c = NULL;
    hilock_lock *l = NULL;
    int rc = hilock_client_open(&c, argv[1], NULL, err, sizeof err);
    if (rc || (rc = hilock_lock_new(&l, c, "bench:c")) != 0) {
        fprintf(stderr, "open: %s %s\n", hilock_strerror(rc), err);
        return 1;
    }
    int slices = strcmp(argv[2], "-") == 0;
    char line[64];
    while (!slices || fgets(line, sizeof line, stdin)) {
        if (slices && (n = atol(line)) <= 0)
            break;
        double t0 = now_ms();
        for (long i = 0; i < n; i++) {
            if ((rc = hilock_lock_acquire(l, 0, 10000)) != 0 ||
                (rc = hilock_lock_release(l)) != 0) {
                fprintf(stderr, "pair %ld: %s\n", i, hilock_strerror(rc));
                return 1;
            }
        }
        printf("%ld %.3f\n", n, now_ms() - t0);
        fflush(stdout);
        if (!slices)
            break;
    }
    hilock_lock_free(l);
    hilock_client_close(c);
    return 0;
}
