/* Multi-lock and Redlock.
 * - Multi-lock: all or nothing over several locks (here two accounts moved
 *   money between, so nobody else touches either meanwhile).
 * - Redlock: a majority (n/2+1) of n locks, each on an independent Redis
 *   server, so the lock survives the loss of a minority of servers.
 * Build: cc multilock.c $(pkg-config --cflags --libs hilock) -o multilock
 * Run:   HILOCK_URL=redis://127.0.0.1:6379 \
 *        HILOCK_REDLOCK_URLS="redis://h1:6379 redis://h2:6379 redis://h3:6379" ./multilock */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hilock.h>

#define MAX_SERVERS 9

static int report(int rc, const char *what, const char *detail)
{
    if (rc != HILOCK_OK)
        fprintf(stderr, "%s: %s (%s)\n", what, hilock_strerror(rc), detail);
    return rc;
}

/* All or nothing: lock both accounts, or neither. */
static int transfer(const char *url)
{
    char err[256];
    hilock_client *client = NULL;
    hilock_lock *accounts[2] = {NULL, NULL};
    hilock_multilock *both = NULL;
    int rc;

    rc = hilock_client_open(&client, url, NULL, err, sizeof err);
    if (report(rc, "cannot open", err) != HILOCK_OK)
        return rc;
    if ((rc = hilock_lock_new(&accounts[0], client, "account:1")) == HILOCK_OK &&
        (rc = hilock_lock_new(&accounts[1], client, "account:2")) == HILOCK_OK &&
        (rc = hilock_multilock_new(&both, accounts, 2)) == HILOCK_OK) {
        rc = hilock_multilock_acquire(both, 5000, 10000); /* wait 5 s, lease 10 s */
        if (rc == HILOCK_OK) {
            printf("multi-lock: holding account:1 and account:2\n");
            /* ... move the money ... */
            rc = hilock_multilock_release(both);
        }
        report(rc, "multi-lock", hilock_multilock_errmsg(both));
    }
    hilock_multilock_free(both); /* before the member handles it points to */
    hilock_lock_free(accounts[0]);
    hilock_lock_free(accounts[1]);
    hilock_client_close(client);
    return rc;
}

/* A majority of independent servers. */
static int redlock(char *urls)
{
    char err[256];
    hilock_client *clients[MAX_SERVERS] = {NULL};
    hilock_lock *locks[MAX_SERVERS] = {NULL};
    hilock_multilock *red = NULL;
    size_t n = 0;
    int rc = HILOCK_OK;

    for (char *url = strtok(urls, " ,"); url && n < MAX_SERVERS; url = strtok(NULL, " ,")) {
        /* Opening checks the server once. The majority must be counted over
         * the full set, so a server missing at start is an error here (later
         * on, a member that fails only counts against the majority). */
        rc = hilock_client_open(&clients[n], url, NULL, err, sizeof err);
        if (report(rc, url, err) != HILOCK_OK)
            goto out;
        if ((rc = hilock_lock_new(&locks[n], clients[n], "cron:invoices")) != HILOCK_OK)
            goto out;
        n++;
    }
    if ((rc = hilock_redlock_new(&red, locks, n)) != HILOCK_OK)
        goto out;
    rc = hilock_multilock_acquire(red, 2000, 10000);
    if (rc == HILOCK_OK) {
        int64_t validity = 0;
        hilock_multilock_validity_ms(&validity, red);
        printf("redlock: held on a majority of %zu servers, valid for %lld ms more\n", n,
               (long long)validity);
        /* ... finish the work well within the validity ... */
        rc = hilock_multilock_release(red);
    }
    report(rc, "redlock", hilock_multilock_errmsg(red));
out:
    hilock_multilock_free(red);
    for (size_t i = 0; i < MAX_SERVERS; i++) {
        hilock_lock_free(locks[i]);
        hilock_client_close(clients[i]);
    }
    return rc;
}

int main(void)
{
    const char *url = getenv("HILOCK_URL");
    const char *urls = getenv("HILOCK_REDLOCK_URLS");
    int rc;

    rc = transfer(url ? url : "redis://127.0.0.1:6379");
    if (rc == HILOCK_OK && urls) {
        char *copy = strdup(urls);
        rc = copy ? redlock(copy) : HILOCK_ENOMEM;
        free(copy);
    }
    return rc == HILOCK_OK ? 0 : 1;
}
