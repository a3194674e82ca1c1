/*
 * A lock of each kind for the test programs that run one case per kind
 * (test_force.c, test_async_force.c): the lock of a HILOCK_KIND_ number on a
 * client, freeing it, the channel its holder listens on, and the list of
 * kinds as an X-macro. Header-only (static functions); include after
 * CUnit/Basic.h and hilock.h.
 */
#ifndef HILOCK_TEST_LOCK_KINDS_H
#define HILOCK_TEST_LOCK_KINDS_H

#include <stdio.h>

/* X(kind, label) for every kind a force-unlock case covers. */
#define LOCK_KINDS(X)                                                                              \
    X(HILOCK_KIND_REENTRANT, reentrant)                                                            \
    X(HILOCK_KIND_FAIR, fair)                                                                      \
    X(HILOCK_KIND_READ, read)                                                                      \
    X(HILOCK_KIND_WRITE, write)                                                                    \
    X(HILOCK_KIND_FENCED, fenced)

/* A lock of kind named name on c; *rw set for the read-write sides (the
 * read-write lock to free), NULL otherwise. */
static inline hilock_lock *kind_lock_new(hilock_client *c, int kind, const char *name,
                                         hilock_rwlock **rw)
{
    hilock_lock *l = NULL;
    *rw = NULL;
    switch (kind) {
    case HILOCK_KIND_FAIR:
        CU_ASSERT_FATAL(hilock_fair_lock_new(&l, c, name) == 0);
        break;
    case HILOCK_KIND_FENCED:
        CU_ASSERT_FATAL(hilock_fenced_lock_new(&l, c, name) == 0);
        break;
    case HILOCK_KIND_READ:
    case HILOCK_KIND_WRITE:
        CU_ASSERT_FATAL(hilock_rwlock_new(rw, c, name) == 0);
        l = kind == HILOCK_KIND_READ ? hilock_rwlock_read_lock(*rw) : hilock_rwlock_write_lock(*rw);
        break;
    default:
        CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
        break;
    }
    return l;
}

/* The kind another client takes to exclude a holder of kind: the write side
 * for a reader (a second reader would share), else the same kind. */
static inline int kind_exclusive(int kind)
{
    return kind == HILOCK_KIND_READ ? HILOCK_KIND_WRITE : kind;
}

/* Frees what kind_lock_new made. */
static inline void kind_lock_free(hilock_lock *l, hilock_rwlock *rw)
{
    if (rw)
        hilock_rwlock_free(rw);
    else
        hilock_lock_free(l);
}

/* The channel a holder of kind named name listens on. */
static inline void kind_channel(char *buf, size_t len, int kind, const char *name)
{
    snprintf(buf, len, "%s:{%s}",
             kind == HILOCK_KIND_READ || kind == HILOCK_KIND_WRITE ? "redisson_rwlock"
                                                                  : "redisson_lock__channel",
             name);
}

#endif
