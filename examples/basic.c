/* A minimal hilock program: take a lock, do some work, release it.
 * Build: cc basic.c $(pkg-config --cflags --libs hilock) -o basic
 * Run:   HILOCK_URL=redis://127.0.0.1:6379 ./basic */
#include <stdio.h>
#include <stdlib.h>
#include <hilock.h>

int main(void)
{
    const char *url = getenv("HILOCK_URL");
    char err[256];
    hilock_client *client = NULL;
    hilock_lock *lock = NULL;
    int rc;

    if (!url)
        url = "redis://127.0.0.1:6379";
    rc = hilock_client_open(&client, url, NULL, err, sizeof err);
    if (rc != HILOCK_OK) {
        char shown[256]; /* the URL without its password */
        hilock_url_redact(shown, sizeof shown, url);
        fprintf(stderr, "cannot open %s: %s (%s)\n", shown, hilock_strerror(rc), err);
        return 1;
    }
    rc = hilock_lock_new(&lock, client, "orders:42");
    if (rc != HILOCK_OK)
        goto out;

    /* Wait up to 5 s; no lease given, so the watchdog keeps the lock alive
     * for as long as we hold it. */
    rc = hilock_lock_acquire(lock, 5000, HILOCK_LEASE_WATCHDOG);
    if (rc == HILOCK_ETIMEDOUT) {
        fprintf(stderr, "somebody else holds orders:42\n");
        goto out;
    }
    if (rc != HILOCK_OK)
        goto out;

    printf("holding %s as %s\n", hilock_lock_name(lock), hilock_client_id(client));
    /* ... critical section: only one process in the cluster runs this ... */

    rc = hilock_lock_release(lock);

out:
    if (rc != HILOCK_OK && rc != HILOCK_ETIMEDOUT)
        fprintf(stderr, "error: %s (%s)\n", hilock_strerror(rc),
                lock ? hilock_lock_errmsg(lock) : hilock_client_errmsg(client));
    hilock_lock_free(lock);
    hilock_client_close(client);
    return rc == HILOCK_OK ? 0 : 1;
}
