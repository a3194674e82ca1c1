/*
 * Aggregate lock+unlock pairs/s from T threads, each on its own lock names,
 * against the URL given (one server or a cluster). Prints one number.
 * Usage: cluster_bench URL THREADS SECONDS
 */
#define _GNU_SOURCE
#include <hilock.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static hilock_client *client;
static double seconds;
static volatile int failed;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
    long id = (long)arg, pairs = 0;
    hilock_lock *locks[16];
    for (int i = 0; i < 16; i++) {
        char name[64];
        snprintf(name, sizeof name, "bench-%ld-%d", id, i);
        if (hilock_lock_new(&locks[i], client, name) != 0)
            failed = 1;
    }
    double end = now() + seconds;
    while (!failed && now() < end) {
        for (int i = 0; i < 16; i++) {
            if (hilock_lock_acquire(locks[i], 0, 10000) != 0 || hilock_lock_release(locks[i]) != 0)
                failed = 1;
            pairs++;
        }
    }
    for (int i = 0; i < 16; i++)
        hilock_lock_free(locks[i]);
    return (void *)pairs;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s URL THREADS SECONDS\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[2]);
    seconds = atof(argv[3]);
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.replica_ack = -1; /* raw throughput: no WAIT on either side */
    o.pool_size = threads;
    char err[256];
    if (hilock_client_open(&client, argv[1], &o, err, sizeof err) != 0) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    pthread_t t[64];
    if (threads < 1 || threads > 64)
        return 2;
    double t0 = now();
    for (long i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    long total = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    double dt = now() - t0;
    hilock_client_close(client);
    if (failed) {
        fprintf(stderr, "a lock operation failed\n");
        return 1;
    }
    printf("%.0f\n", (double)total / dt);
    return 0;
}
