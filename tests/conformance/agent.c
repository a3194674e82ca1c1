/*
 * Conformance agent for the blocking C client (libhilock).
 *
 * One process, one hilock client opened with the options on the command
 * line; every actor named in a request is its own thread (tests/common/
 * line_agent.c), so its own owner "<client-uuid>:<os-thread-id>". The line
 * protocol is the one every conformance agent speaks
 * (tests/conformance/README.md):
 *
 *   request : ACTOR CMD KIND NAME [ARGS...]
 *             KIND r (reentrant) | f (fair) | fenced | read | write
 *   answer  : ACTOR ok [VALUES...]   or   ACTOR err ERRKIND [detail]
 *
 * Usage: conformance-agent URL [key=value ...]
 *   keys: watchdog_lease_ms command_timeout_ms connect_timeout_ms
 *         replica_ack (1/0) replica_ack_timeout_ms
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hilock.h"
#include "line_agent.h"

#define MAX_WORDS 8

/* What the actors share (one instance, in main). */
typedef struct agent {
    hilock_client *client;
    line_agent_objects objs;
} agent;

static const char *const kinds[] = {"r", "f", "fenced", "read", "write", NULL};

static int kind_known(const char *kind)
{
    for (int i = 0; kinds[i]; i++)
        if (strcmp(kinds[i], kind) == 0)
            return 1;
    return 0;
}

/* KIND sem | pes | latch (tests/conformance/README.md). The actor's last
 * permit id (pes) is its actor_data. */
static void run_sem(agent *ag, const char *actor, char **w, int nw, void **actor_data)
{
    const char *cmd = w[1], *kind = w[2];
    int rc = 0, flag = 0;
    int64_t n = 0;
    void *h = line_agent_sem_of(&ag->objs, ag->client, kind, w[3], &rc);
    if (!h) {
        line_agent_say(actor, "err %s %s", line_agent_err_kind(rc), hilock_strerror(rc));
        return;
    }
    int sem = strcmp(kind, "sem") == 0, pes = strcmp(kind, "pes") == 0;
    int64_t a = nw > 4 ? strtoll(w[4], NULL, 10) : 0, b = nw > 5 ? strtoll(w[5], NULL, 10) : 0;
    int64_t c = nw > 6 ? strtoll(w[6], NULL, 10) : 0;
    if (strcmp(cmd, "setp") == 0 && nw == 5) {
        rc = sem ? hilock_semaphore_try_set_permits(&flag, h, a)
             : pes ? hilock_permit_semaphore_try_set_permits(&flag, h, a)
                   : hilock_latch_try_set_count(&flag, h, a);
    } else if (strcmp(cmd, "acquire") == 0 && nw == 7 && strcmp(kind, "latch") != 0) {
        if (sem) {
            rc = hilock_semaphore_acquire(h, a, b);
        } else {
            char id[HILOCK_PERMIT_ID_SIZE];
            rc = hilock_permit_semaphore_acquire(id, h, b, c);
            if (rc == 0) {
                if (!*actor_data)
                    *actor_data = calloc(1, HILOCK_PERMIT_ID_SIZE);
                if (*actor_data)
                    memcpy(*actor_data, id, HILOCK_PERMIT_ID_SIZE);
            }
        }
        if (rc == HILOCK_ETIMEDOUT) {
            line_agent_say(actor, "ok 0");
            return;
        }
        flag = 1;
    } else if (strcmp(cmd, "release") == 0 && (pes || nw == 5) && strcmp(kind, "latch") != 0) {
        rc = sem ? hilock_semaphore_release(h, a)
                 : hilock_permit_semaphore_release(h, *actor_data ? (char *)*actor_data : "");
        if (rc == 0) {
            line_agent_say(actor, "ok");
            return;
        }
    } else if (strcmp(cmd, "avail") == 0) {
        rc = sem ? hilock_semaphore_available(&n, h)
             : pes ? hilock_permit_semaphore_available(&n, h)
                   : hilock_latch_count(&n, h);
        if (rc == 0) {
            line_agent_say(actor, "ok %" PRId64, n);
            return;
        }
    } else if (strcmp(cmd, "countdown") == 0 && strcmp(kind, "latch") == 0) {
        rc = hilock_latch_count_down(&n, h);
        if (rc == 0) {
            line_agent_say(actor, "ok %" PRId64, n);
            return;
        }
    } else if (strcmp(cmd, "await") == 0 && nw == 5 && strcmp(kind, "latch") == 0) {
        rc = hilock_latch_await(h, a);
        if (rc == HILOCK_ETIMEDOUT) {
            line_agent_say(actor, "ok 0");
            return;
        }
        flag = 1;
    } else {
        line_agent_say(actor, "err usage unknown command %s for %s", cmd, kind);
        return;
    }
    if (rc == 0)
        line_agent_say(actor, "ok %d", flag != 0);
    else
        line_agent_say(actor, "err %s %s", line_agent_err_kind(rc), hilock_strerror(rc));
}

static void run(void *ctx, const char *actor, char *line, void **actor_data)
{
    agent *ag = ctx;
    char *w[MAX_WORDS] = {0};
    int nw = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t\r\n", &save); t && nw < MAX_WORDS;
         t = strtok_r(NULL, " \t\r\n", &save))
        w[nw++] = t;
    if (nw >= 4 && (!strcmp(w[2], "sem") || !strcmp(w[2], "pes") || !strcmp(w[2], "latch"))) {
        run_sem(ag, actor, w, nw, actor_data);
        return;
    }
    if (nw < 4 || !kind_known(w[2])) {
        line_agent_say(actor, "err usage ACTOR CMD r|f|fenced|read|write NAME ...");
        return;
    }
    const char *cmd = w[1];
    int rc = 0;
    hilock_lock *l = line_agent_lock_of(&ag->objs, ag->client, w[2], w[3], &rc);
    if (!l) {
        line_agent_say(actor, "err %s %s", line_agent_err_kind(rc), hilock_strerror(rc));
        return;
    }
    int flag = 0;
    int64_t n = 0;
    if (strcmp(cmd, "lock") == 0 && nw == 6) {
        rc = hilock_lock_acquire_token(&n, l, strtoll(w[4], NULL, 10), strtoll(w[5], NULL, 10));
        if (rc == HILOCK_ETIMEDOUT) {
            line_agent_say(actor, "ok 0");
            return;
        }
        if (rc == 0 && strcmp(w[2], "fenced") == 0) { /* a fenced grant: its token */
            line_agent_say(actor, "ok 1 %" PRId64, n);
            return;
        }
        flag = 1;
    } else if (strcmp(cmd, "token") == 0) {
        rc = hilock_lock_token(&n, l);
        if (rc == 0) {
            line_agent_say(actor, "ok %" PRId64, n);
            return;
        }
    } else if (strcmp(cmd, "unlock") == 0) {
        rc = hilock_lock_release(l);
        if (rc == 0) {
            line_agent_say(actor, "ok");
            return;
        }
    } else if (strcmp(cmd, "force") == 0) {
        rc = hilock_lock_force_unlock(&flag, l);
    } else if (strcmp(cmd, "locked") == 0) {
        rc = hilock_lock_is_locked(&flag, l);
    } else if (strcmp(cmd, "held") == 0) {
        rc = hilock_lock_is_held(&flag, l);
    } else if (strcmp(cmd, "lost") == 0) {
        flag = hilock_lock_is_lost(l) ? 1 : 0;
    } else if (strcmp(cmd, "holds") == 0 || strcmp(cmd, "ttl") == 0) {
        rc = cmd[0] == 'h' ? hilock_lock_hold_count(&n, l) : hilock_lock_remaining_ms(&n, l);
        if (rc == 0) {
            line_agent_say(actor, "ok %" PRId64, n);
            return;
        }
    } else {
        line_agent_say(actor, "err usage unknown command %s", cmd);
        return;
    }
    if (rc == 0)
        line_agent_say(actor, "ok %d", flag != 0);
    else
        line_agent_say(actor, "err %s %s", line_agent_err_kind(rc), hilock_strerror(rc));
}

int main(int argc, char **argv)
{
    static agent ag;
    hilock_options opts;
    char err[256] = "";

    if (argc < 2) {
        fprintf(stderr, "usage: %s URL [key=value ...]\n", argv[0]);
        return 2;
    }
    hilock_options_init(&opts, HILOCK_OPTIONS_VERSION);
    for (int i = 2; i < argc; i++) {
        if (line_agent_set_option(&opts, argv[i]) != 0) {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    line_agent_objects_init(&ag.objs);
    int rc = hilock_client_open(&ag.client, argv[1], &opts, err, sizeof err);
    if (rc != 0) {
        line_agent_say("agent", "err %s %s", line_agent_err_kind(rc), err);
        return 1;
    }
    line_agent_say("agent", "ok ready");
    /* ends the process; actors may still be blocked in an acquire, so the
     * client is not torn down under them */
    line_agent_serve(run, &ag);
}
