/* The watchdog and the lost-lock callback.
 * A lock taken without a lease is kept alive by the client's watchdog thread
 * (renewed every lease/3) for as long as we hold it. If it disappears anyway
 * (it expired while the network was down, or an operator ran
 * `hilock unlock --force`), the watchdog tells us through the callback.
 * Here a second client stands in for that operator.
 * Build: cc watchdog.c $(pkg-config --cflags --libs hilock) -pthread -o watchdog
 * Run:   HILOCK_URL=redis://127.0.0.1:6379 ./watchdog */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <hilock.h>

/* What the callback shares with main: it runs on the watchdog thread. */
struct loss {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int lost;
};

/* Runs on the client's watchdog thread: keep it short, do not block, and do
 * not call back into this lock (just record the news and wake main). */
static void on_lost(hilock_lock *lock, uint64_t thread_id, void *payload)
{
    struct loss *l = payload;
    (void)lock;
    (void)thread_id;
    pthread_mutex_lock(&l->mu);
    l->lost = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void)
{
    const char *url = getenv("HILOCK_URL");
    char err[256];
    hilock_options opts = HILOCK_OPTIONS_INIT;
    hilock_client *client = NULL, *operator = NULL;
    hilock_lock *lock = NULL, *forced = NULL;
    struct loss loss = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    int64_t ttl = 0;
    int rc;

    if (!url)
        url = "redis://127.0.0.1:6379";
    opts.watchdog_lease_ms = 1500; /* short, to see renewals quickly (default 30 s) */
    rc = hilock_client_open(&client, url, &opts, err, sizeof err);
    if (rc != HILOCK_OK) {
        char shown[256]; /* the URL without its password */
        hilock_url_redact(shown, sizeof shown, url);
        fprintf(stderr, "cannot open %s: %s (%s)\n", shown, hilock_strerror(rc), err);
        return 1;
    }
    if ((rc = hilock_lock_new(&lock, client, "reports:daily")) != HILOCK_OK)
        goto out;
    hilock_lock_set_lost_callback(lock, on_lost, &loss);
    if ((rc = hilock_lock_acquire(lock, 5000, HILOCK_LEASE_WATCHDOG)) != HILOCK_OK)
        goto out;

    /* Hold it for twice the lease: the watchdog keeps renewing it. */
    sleep_ms(3000);
    if ((rc = hilock_lock_remaining_ms(&ttl, lock)) != HILOCK_OK)
        goto out;
    printf("after 3 s with a 1.5 s lease: still held, %lld ms left\n", (long long)ttl);

    /* Somebody forces it away. */
    rc = hilock_client_open(&operator, url, NULL, err, sizeof err);
    if (rc == HILOCK_OK)
        rc = hilock_lock_new(&forced, operator, "reports:daily");
    if (rc == HILOCK_OK)
        rc = hilock_lock_force_unlock(NULL, forced);
    if (rc != HILOCK_OK)
        goto out;
    printf("forced away by another client\n");

    /* The next renewal (within lease/3) finds it gone and calls on_lost. */
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 5;
    pthread_mutex_lock(&loss.mu);
    while (!loss.lost && pthread_cond_timedwait(&loss.cv, &loss.mu, &deadline) == 0)
        ;
    int lost = loss.lost;
    pthread_mutex_unlock(&loss.mu);
    printf("%s\n", lost ? "lost-lock callback: the lock is gone, stop the work"
                        : "no lost-lock callback within 5 s");
    /* Releasing a lock we lost says so. */
    rc = hilock_lock_release(lock);
    printf("release after the loss: %s\n", hilock_strerror(rc));
    rc = lost && rc == HILOCK_ENOTOWNER ? HILOCK_OK : HILOCK_EPROTO;

out:
    if (rc != HILOCK_OK)
        fprintf(stderr, "error: %s (%s)\n", hilock_strerror(rc),
                lock ? hilock_lock_errmsg(lock) : hilock_client_errmsg(client));
    hilock_lock_free(forced);
    hilock_client_close(operator);
    hilock_lock_free(lock);
    hilock_client_close(client);
    return rc == HILOCK_OK ? 0 : 1;
}
