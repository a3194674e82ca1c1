/*
 * The skeleton shared by the test agents that speak a line protocol on
 * stdin/stdout (tests/interop/driver.c, tests/conformance/agent.c):
 *
 *   request : ACTOR WORDS...        answer : ACTOR ...
 *
 * Every actor named in a request is its own thread, created the first time
 * its name is seen, which runs that actor's requests in order; so with the
 * plain hilock calls each actor is a distinct owner "<client-uuid>:<tid>".
 */
#ifndef HILOCK_TESTS_LINE_AGENT_H
#define HILOCK_TESTS_LINE_AGENT_H

/* Runs one request on the actor's thread. `line` is the whole request line
 * (it may be modified); `*actor_data` starts NULL and is the actor's own. */
typedef void (*line_agent_fn)(void *ctx, const char *actor, char *line, void **actor_data);

#include <pthread.h>
#include <stddef.h>

#include "hilock.h"

/* The conformance protocol's error kind of a HILOCK_E* code: timeout,
 * notowner, lost, connection, protocol, auth, wrongtype, closed, nomem,
 * invalid, other (tests/conformance/README.md). */
const char *line_agent_err_kind(int rc);

/* One "key=value" client option of the agents' command line into o:
 * watchdog_lease_ms command_timeout_ms connect_timeout_ms replica_ack (1/0)
 * replica_ack_timeout_ms. 0, or -1 for an unknown key. */
int line_agent_set_option(hilock_options *o, const char *kv);

/* The conformance agents' objects (tests/conformance/README.md).
 * line_agent_new_lock: kind r | f | fenced | read | write; for read and
 * write *rw gets the read-write lock that owns *out (else it stays NULL).
 * line_agent_new_sem: kind sem | pes | latch; *out a hilock_semaphore,
 * hilock_permit_semaphore or hilock_latch. Return 0 or the HILOCK_E* code. */
int line_agent_new_lock(hilock_lock **out, hilock_rwlock **rw, hilock_client *c, const char *kind,
                        const char *name);
int line_agent_new_sem(void **out, hilock_client *c, const char *kind, const char *name);

/* The objects of the conformance agents (tests/conformance/agent.c,
 * agent_async.c), each made once per (kind, name) and shared by every actor
 * (a handle acts for the calling thread, or the thread id given). Zero it,
 * then line_agent_objects_init. */
#define LINE_AGENT_MAX_OBJECTS 64
typedef struct line_agent_object {
    char kind[8];
    char *name;
    void *h;           /* hilock_lock *, or a semaphore, permit semaphore or latch */
    hilock_rwlock *rw; /* owns h for the read and write kinds */
} line_agent_object;
typedef struct line_agent_objects {
    pthread_mutex_t mu;
    line_agent_object locks[LINE_AGENT_MAX_OBJECTS], sems[LINE_AGENT_MAX_OBJECTS];
    size_t nlocks, nsems;
} line_agent_objects;
void line_agent_objects_init(line_agent_objects *t);
/* The lock (line_agent_new_lock's kinds) or the semaphore / latch
 * (line_agent_new_sem's) for (kind, name) on c, made the first time; NULL
 * with *rc the HILOCK_E* code when it cannot be made (HILOCK_ENOMEM once
 * LINE_AGENT_MAX_OBJECTS of a sort exist). Thread-safe. */
hilock_lock *line_agent_lock_of(line_agent_objects *t, hilock_client *c, const char *kind,
                                const char *name, int *rc);
void *line_agent_sem_of(line_agent_objects *t, hilock_client *c, const char *kind,
                        const char *name, int *rc);
/* Frees every object (before the client is closed). */
void line_agent_objects_free(line_agent_objects *t);

/* Writes "WHO <formatted text>\n" to stdout as one line (thread-safe). */
void line_agent_say(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reads requests from stdin until EOF or a line "quit", hands each to its
 * actor's thread, then ends the process with status 0 without waiting for
 * actors still blocked in a call (the servers outlive the agent). */
void line_agent_serve(line_agent_fn fn, void *ctx) __attribute__((noreturn));

#endif
