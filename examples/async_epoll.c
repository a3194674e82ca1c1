/*
 * The non-blocking API on an epoll loop: three requests of one thread want
 * the same lock; each is granted in turn, woken by the previous holder's
 * unlock message, and releases it from its completion callback. Nothing
 * blocks, no thread is started.
 *
 *   cc async_epoll.c $(pkg-config --cflags --libs hilock)
 *   HILOCK_URL=redis://127.0.0.1:6379 ./a.out
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread types (strict C11 builds) */
#include <stdio.h>
#include <stdlib.h>

#include <hilock.h>
#include <hilock/adapters/epoll.h>

static hilock_lock *lock;
static int finished;

static void released(hilock_async *a, int rc, int64_t holds_left, void *payload)
{
    (void)a, (void)holds_left;
    printf("request %d released: %s\n", (int)(intptr_t)payload, hilock_strerror(rc));
    finished++;
}

static void granted(hilock_async *a, int rc, int64_t holds, void *payload)
{
    int id = (int)(intptr_t)payload;
    if (rc != HILOCK_OK) {
        printf("request %d: %s (%s)\n", id, hilock_strerror(rc), hilock_async_errmsg(a));
        finished++;
        return;
    }
    printf("request %d has the lock (holds: %lld)\n", id, (long long)holds);
    /* ... the work; then hand it on */
    hilock_async_release(a, lock, (uint64_t)id, released, payload);
}

int main(void)
{
    const char *url = getenv("HILOCK_URL");
    char err[256];
    hilock_client *client;
    if (hilock_client_open(&client, url ? url : "redis://127.0.0.1:6379", NULL, err,
                           sizeof err) != HILOCK_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    hilock_lock_new(&lock, client, "orders:export");

    hilock_epoll ep;
    if (hilock_epoll_init(&ep) != 0)
        return 1;
    hilock_async_loop loop = hilock_epoll_loop(&ep);
    hilock_async *a;
    hilock_async_new(&a, &loop);

    /* thread ids name the owners: one per request, all on this thread */
    for (intptr_t id = 1; id <= 3; id++)
        hilock_async_acquire(a, lock, (uint64_t)id, 5000, HILOCK_LEASE_WATCHDOG, granted,
                             (void *)id);
    while (finished < 3)
        hilock_epoll_run_once(&ep, a, 1000);
    printf("done\n");

    hilock_async_free(a);
    hilock_epoll_close(&ep);
    hilock_lock_free(lock);
    hilock_client_close(client);
    return 0;
}
