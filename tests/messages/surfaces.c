/*
 * Every message the C library prints or returns about a server URL, for
 * tests/messages/run.sh to search for passwords: for each URL given, the
 * redacted URL, what hilock_client_open says, and (opened) the client's
 * and a lock's detail messages after a failing call.
 * Usage: secret_surfaces URL...
 */
#include <stdio.h>
#include <string.h>

#include "hilock.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *url = argv[i];
        char shown[512], small[12];
        hilock_url_redact(shown, sizeof shown, url);
        size_t n = hilock_url_redact(small, sizeof small, url);
        printf("C redact: %s (cut to 11: '%s' of %zu)\n", shown, small, n);
        hilock_options o;
        hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
        o.connect_timeout_ms = 500;
        o.command_timeout_ms = 500;
        o.pool_size = 1;
        hilock_client *c = NULL;
        char err[512] = "";
        int rc = hilock_client_open(&c, url, &o, err, sizeof err);
        printf("C open %s: %d %s: %s\n", shown, rc, hilock_strerror(rc), err);
        if (rc)
            continue;
        hilock_lock *l = NULL;
        rc = hilock_lock_new(&l, c, "");
        printf("C lock_new(\"\"): %d %s: %s\n", rc, hilock_strerror(rc), hilock_client_errmsg(c));
        char longname[5001];
        memset(longname, 'n', 5000);
        longname[5000] = 0;
        rc = hilock_lock_new(&l, c, longname);
        printf("C lock_new(5000 bytes): %d %s: %s\n", rc, hilock_strerror(rc),
               hilock_client_errmsg(c));
        rc = hilock_lock_new(&l, c, "secrets:x");
        if (rc == 0) {
            rc = hilock_lock_release(l);
            printf("C release unheld: %d %s: %s\n", rc, hilock_strerror(rc), hilock_lock_errmsg(l));
            hilock_lock_free(l);
        }
        printf("C client errmsg: %s\n", hilock_client_errmsg(c));
        hilock_client_close(c);
    }
    return 0;
}
