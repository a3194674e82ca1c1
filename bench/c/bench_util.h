/*
 * What every C bench program needs and wrote for itself before: a monotonic
 * clock, the median of a series, int64 ordering for qsort, the client named
 * on the command line opened (or the program ends), and the port of a
 * redis://host:port URL for a raw hiredis connection next to the library.
 * Header only (static inline): each bench is one .c file.
 */
#ifndef HILOCK_BENCH_UTIL_H
#define HILOCK_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hilock.h"

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline double now_s(void)
{
    return (double)now_ns() / 1e9;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place. */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The options -n pairs and -r rounds (*n and *rounds keep their defaults
 * when absent), then urls URLs. 0, or the usage on stderr and 2 (the exit
 * code) for another option, another number of URLs, or numbers out of
 * range (pairs >= 1, rounds 1..1000). */
static inline int bench_args(int argc, char **argv, int *n, int *rounds, int urls,
                             const char *usage)
{
    int opt;
    while ((opt = getopt(argc, argv, "n:r:")) != -1) {
        if (opt == 'n')
            *n = atoi(optarg);
        else if (opt == 'r')
            *rounds = atoi(optarg);
        else
            return 2;
    }
    if (argc - optind != urls || *n < 1 || *rounds < 1 || *rounds > 1000) {
        fprintf(stderr, "usage: %s\n", usage);
        return 2;
    }
    return 0;
}

/* The client for url; on failure the reason on stderr and exit(1). */
static inline hilock_client *bench_open(const char *url)
{
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, url, NULL, err, sizeof err);
    if (rc) {
        fprintf(stderr, "open %s: %s (%s)\n", url, hilock_strerror(rc), err);
        exit(1);
    }
    return c;
}

/* The port after the URL's last ':' (6379 without one). */
static inline int bench_url_port(const char *url)
{
    const char *colon = strrchr(url, ':');
    return colon ? atoi(colon + 1) : 6379;
}

#endif
