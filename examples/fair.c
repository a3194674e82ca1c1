/* A fair (FIFO) lock: waiters get it in the order they asked.
 * Three worker threads line up behind the main thread, which holds the lock;
 * when it lets go they run one after another, first come, first served.
 * Build: cc fair.c $(pkg-config --cflags --libs hilock) -pthread -o fair
 * Run:   HILOCK_URL=redis://127.0.0.1:6379 ./fair */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <hilock.h>

struct worker {
    hilock_lock *lock; /* one handle, shared: each thread holds for itself */
    int number;
    int rc;
};

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *work(void *arg)
{
    struct worker *w = arg;
    /* Wait up to 10 s for our turn, then hold it with a 10 s lease. */
    w->rc = hilock_lock_acquire(w->lock, 10000, 10000);
    if (w->rc != HILOCK_OK)
        return NULL;
    printf("worker %d has the lock\n", w->number);
    fflush(stdout);
    sleep_ms(50);
    w->rc = hilock_lock_release(w->lock);
    return NULL;
}

int main(void)
{
    const char *url = getenv("HILOCK_URL");
    char err[256];
    hilock_client *client = NULL;
    hilock_lock *lock = NULL;
    struct worker workers[3];
    pthread_t threads[3];
    int rc, started = 0;

    if (!url)
        url = "redis://127.0.0.1:6379";
    rc = hilock_client_open(&client, url, NULL, err, sizeof err);
    if (rc != HILOCK_OK) {
        char shown[256]; /* the URL without its password */
        hilock_url_redact(shown, sizeof shown, url);
        fprintf(stderr, "cannot open %s: %s (%s)\n", shown, hilock_strerror(rc), err);
        return 1;
    }
    rc = hilock_fair_lock_new(&lock, client, "jobs:nightly");
    if (rc != HILOCK_OK)
        goto out;
    rc = hilock_lock_acquire(lock, 5000, 10000);
    if (rc != HILOCK_OK)
        goto out;
    printf("main has the lock; workers line up\n");

    /* Start the workers 300 ms apart, so that they queue in order 1, 2, 3. */
    for (int i = 0; i < 3; i++) {
        workers[i] = (struct worker){lock, i + 1, HILOCK_OK};
        if (pthread_create(&threads[i], NULL, work, &workers[i]) != 0)
            break;
        started++;
        sleep_ms(300);
    }
    /* Said before the release: worker 1 may print before this thread
     * returns from it. */
    printf("main releases\n");
    fflush(stdout);
    rc = hilock_lock_release(lock); /* wakes worker 1 only */
    for (int i = 0; i < started; i++) {
        pthread_join(threads[i], NULL);
        if (workers[i].rc != HILOCK_OK && rc == HILOCK_OK)
            rc = workers[i].rc;
    }

out:
    if (rc != HILOCK_OK)
        fprintf(stderr, "error: %s (%s)\n", hilock_strerror(rc),
                lock ? hilock_lock_errmsg(lock) : hilock_client_errmsg(client));
    hilock_lock_free(lock);
    hilock_client_close(client);
    return rc == HILOCK_OK ? 0 : 1;
}
