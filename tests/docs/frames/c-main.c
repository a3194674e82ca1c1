/* Frame "c-main" (tests/docs): a C fragment of the docs runs as the body of
 * main(), with `client` open on $HILOCK_URL and `lock` ("orders:42") made;
 * run_job() and work() stand for the reader's own code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hilock.h>

static inline void run_job(void) { puts("job"); }
static inline void work(void) { puts("work"); }

int main(void)
{
    char err[256];
    hilock_client *client = NULL;
    hilock_lock *lock = NULL;
    if (hilock_client_open(&client, getenv("HILOCK_URL"), NULL, err, sizeof err) != HILOCK_OK ||
        hilock_lock_new(&lock, client, "orders:42") != HILOCK_OK) {
        fprintf(stderr, "frame: %s\n", err);
        return 1;
    }
    {
        @BLOCK@
    }
    hilock_lock_free(lock);
    hilock_client_close(client);
    return 0;
}
