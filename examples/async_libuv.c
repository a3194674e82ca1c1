/*
 * The non-blocking API on libuv: three requests want the same lock; each is
 * granted in turn (woken by the unlock message) and releases it from its
 * completion callback; the loop thread is the only thread.
 *
 *   cc async_libuv.c $(pkg-config --cflags --libs hilock libuv)
 *   HILOCK_URL=redis://127.0.0.1:6379 ./a.out
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread types (strict C11 builds) */
#include <stdio.h>
#include <stdlib.h>

#include <hilock.h>
#include <hilock/adapters/libuv.h>

static hilock_lock *lock;
static hilock_uv u;
static int finished;

static void released(hilock_async *a, int rc, int64_t holds_left, void *payload)
{
    (void)a, (void)holds_left;
    printf("request %d released: %s\n", (int)(intptr_t)payload, hilock_strerror(rc));
    if (++finished == 3)
        uv_stop(u.loop);
}

static void granted(hilock_async *a, int rc, int64_t holds, void *payload)
{
    int id = (int)(intptr_t)payload;
    if (rc != HILOCK_OK) {
        printf("request %d: %s (%s)\n", id, hilock_strerror(rc), hilock_async_errmsg(a));
        released(a, rc, 0, payload);
        return;
    }
    printf("request %d has the lock (holds: %lld)\n", id, (long long)holds);
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

    hilock_uv_init(&u, uv_default_loop());
    hilock_async_loop loop = hilock_uv_loop(&u);
    hilock_async_new(&u.async, &loop);

    for (intptr_t id = 1; id <= 3; id++)
        hilock_async_acquire(u.async, lock, (uint64_t)id, 5000, HILOCK_LEASE_WATCHDOG, granted,
                             (void *)id);
    uv_run(u.loop, UV_RUN_DEFAULT); /* until the last release stops it */
    printf("done\n");

    hilock_async_free(u.async);
    hilock_uv_close(&u);
    uv_run(u.loop, UV_RUN_DEFAULT); /* let the handles finish closing */
    uv_loop_close(u.loop);
    hilock_lock_free(lock);
    hilock_client_close(client);
    return 0;
}
