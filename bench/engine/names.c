/* The per-call names the engine writes for one acquire and one release
 * (owner, acquire latch argument, release request id): hl_sb (libcore's
 * proto.c) against the snprintf calls it replaced, alternated in one run.
 * Not built by CMake; docs/benchmarks.md has the command. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "proto.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static volatile size_t sink;

int main(void)
{
    const char *cid = "4f6c1a2e-9b1d-4c1e-8a7f-2d3b4c5d6e7f", *lp = "hilock_latch:{lockname}";
    char own[HL_OWNER_MAX], b1[256], b2[256];
    enum { N = 2000000 };
    for (int round = 0; round < 3; round++) {
        double t0 = now();
        for (uint64_t i = 0; i < N; i++) {
            snprintf(own, HL_OWNER_MAX, "%s:%" PRIu64 "%s", cid, i + 140000, "");
            snprintf(b1, sizeof b1, "%s:%s:%" PRIu64 ":%" PRIu64, lp, own, (uint64_t)1, i);
            snprintf(b2, sizeof b2, "%s:e%" PRIu64 ":%" PRIu64, cid, (uint64_t)1, i);
            sink += (size_t)(own[3] + b1[5] + b2[7]);
        }
        double t1 = now();
        for (uint64_t i = 0; i < N; i++) {
            hl_hold_owner(own, HILOCK_KIND_REENTRANT, cid, i + 140000);
            hl_latch_arg(b1, sizeof b1, lp, own, 1, i);
            hl_release_request_id(b2, sizeof b2, cid, 1, i);
            sink += (size_t)(own[3] + b1[5] + b2[7]);
        }
        double t2 = now();
        printf("snprintf %.1f ns  hl_sb %.1f ns  per owner + latch + request id (%.2fx)\n",
               (t1 - t0) / N * 1e9, (t2 - t1) / N * 1e9, (t1 - t0) / (t2 - t1));
    }
    return 0;
}
